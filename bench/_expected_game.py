"""Shared by bench/_faithfulness.py: the reference for a random forest's shares, exact Shapley
of the forest's *expected* game, and its floor.

A forest's coalition value depends on its seed (the bootstrap draws and the features tried at
each split): at the bench's data sizes one seed's exact Shapley moves by 13-100 % of the pool
when only the row order changes. The expected game values each coalition by its improvement
averaged over K forests of different seeds, on the same rows. K forests of T trees are drawn
as one forest of 2K x T trees cut into 2K blocks of T (each block is a forest whose trees got
independent seeds, as K separately seeded forests would): blocks 0..K-1 are the reference,
blocks K..2K-1 the floor, the same game with disjoint seeds. The distance between the two is
what seed-averaging leaves: no split can be expected to be closer to the reference.

Shares are compared as fractions of the pool (a rejected contribution gets 0): the pool is the
real model's either way, and what a surrogate decides is its split.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from scipy.stats import spearmanr

from bench._stand_in import StandInGame
from pipeline.evaluation.metrics import Predictions, improvement_denominator, metric_score
from pipeline.evaluation.scorer import BenchmarkScorer, _class_scores
from pipeline.models.estimators import as_recipe, build_estimator
from pipeline.rewards.interval import improvement_interval
from pipeline.rewards.shapley import Coalition, exact_shapley
from pipeline.rewards.valuation import Player

BLOCK_SEED = 7


def block_scores(scorer: BenchmarkScorer, frame: pd.DataFrame, blocks: int) -> np.ndarray:
    """The benchmark score of each of `blocks` forests (module docstring) trained on `frame`."""
    recipe = as_recipe(scorer.recipe) if scorer.recipe else None
    assert recipe is not None
    train = scorer.labelled(frame)
    columns = scorer.feature_columns(train)
    y = train[scorer.target_column]
    if train.empty or not columns or (scorer.classes and y.nunique() < 2):
        return np.full(blocks, scorer.score(frame))  # the trivial baseline: no seed
    trees = int(recipe.params.get("n_estimators", 100))
    pipeline = build_estimator(recipe, scorer.task_type, rows=len(train))
    pipeline.set_params(model__n_estimators=trees * blocks, model__random_state=BLOCK_SEED)
    pipeline.fit(train[columns], y.to_numpy())
    x_bench = pipeline["features"].transform(scorer.bench[columns])
    model = pipeline["model"]
    name, y_true = scorer.metric.name, scorer.y_true
    scores = []
    for b in range(blocks):
        block = model.estimators_[b * trees : (b + 1) * trees]
        if scorer.task_type == "regression":
            values = np.mean([t.predict(x_bench) for t in block], axis=0)
            scores.append(metric_score(Predictions(name, y_true, values)))
            continue
        proba = np.mean([t.predict_proba(x_bench) for t in block], axis=0)
        if scorer.metric.uses_probabilities:
            predictions = Predictions(
                name, y_true, _class_scores(scorer.classes, model.classes_, proba), scorer.classes
            )
        else:
            labels = model.classes_[proba.argmax(axis=1)]
            predictions = Predictions(name, y_true, labels, scorer.classes)
        scores.append(metric_score(predictions))
    return np.asarray(scores)


def expected_games(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: Sequence[Player],
    k: int,
    higher_is_better: bool,
    workers: int = 2,
) -> tuple[dict[Coalition, float], dict[Coalition, float]]:
    """Every coalition's value (percent improvement) in the reference and the floor games."""
    n = len(players)
    coalitions = [frozenset(c) for size in range(n + 1) for c in combinations(range(n), size)]

    def frame(c: Coalition) -> pd.DataFrame:
        parts = [base, *(players[i].frame for i in sorted(c))]
        return pd.concat([p for p in parts if len(p)], ignore_index=True)

    scores = Parallel(n_jobs=workers, prefer="threads")(
        delayed(block_scores)(scorer, frame(c), 2 * k) for c in coalitions
    )
    table = dict(zip(coalitions, scores, strict=True))
    without = table[frozenset()]
    sign = 1.0 if higher_is_better else -1.0
    denominators = np.asarray([improvement_denominator(s, scorer.floor) for s in without])
    gains = {c: sign * (s - without) / denominators * 100.0 for c, s in table.items()}
    return (
        {c: float(g[:k].mean()) for c, g in gains.items()},
        {c: float(g[k:].mean()) for c, g in gains.items()},
    )


def paid_fractions(value: Callable[[Coalition], float], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact Shapley rounds as `value_batch` plays them (a contribution whose share is <= 0 is
    rejected, the rest play again): each player's fraction of the pool (0 when rejected), and
    its last share (for the rank correlation)."""
    active = list(range(n))
    shares: dict[int, float] = {}
    while active:
        round_shares = exact_shapley(active, value)
        shares.update(round_shares)
        kept = [i for i in active if round_shares[i] > 0]
        if kept == active:
            break
        active = kept
    total = sum(shares[i] for i in active)
    fractions = np.zeros(n)
    for i in active:
        fractions[i] = shares[i] / total if total > 0 else 0.0
    return fractions, np.asarray([shares[i] for i in range(n)])


def forest_reference(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: Sequence[Player],
    k: int,
    higher_is_better: bool,
) -> dict[str, Any]:
    """The reference's and the floor's fractions and shares, and the reference's pool."""
    reference, floor = expected_games(scorer, base, players, k, higher_is_better)
    n = len(players)
    ref_fractions, ref_shares = paid_fractions(reference.__getitem__, n)
    floor_fractions, floor_shares = paid_fractions(floor.__getitem__, n)
    kept = frozenset(int(i) for i in np.flatnonzero(ref_fractions > 0))
    return {
        "fractions": ref_fractions,
        "shares": ref_shares,
        "pool": reference[kept] if kept else 0.0,
        "floor_fractions": floor_fractions,
        "floor_shares": floor_shares,
    }


def significant(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: Sequence[Player],
    kept: Sequence[int],
    higher_is_better: bool,
) -> bool:
    """Whether the model (its own seed) trained with the kept players is better than without
    them by the paired bootstrap interval, as `value_batch` requires before paying a pool."""
    without = scorer.predict(base)
    with_ = scorer.predict(pd.concat([base, *(players[i].frame for i in kept)], ignore_index=True))
    interval = improvement_interval(
        without,
        with_,
        higher_is_better=higher_is_better,
        denominator=improvement_denominator(metric_score(without), scorer.floor),
        resamples=200,
        level=0.95,
    )
    return interval.low > 0


def stand_in_game(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: Sequence[Player],
    higher_is_better: bool,
) -> StandInGame:
    """The game a forest's split is measured with: the valuation's linear stand-in."""
    frames = [p.frame for p in players]
    return StandInGame(
        scorer, base, frames, max_base_rows=50_000, higher_is_better=higher_is_better
    )


def forest_scenario(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: Sequence[Player],
    k: int,
    higher_is_better: bool,
) -> dict[str, tuple[float, float]] | None:
    """(largest paid-fraction error in % of the pool, Spearman of the shares) of the stand-in
    and of the floor against the expected game's exact Shapley; None when the reference does not
    pay the batch (its pool not above 0, or the model's improvement with the players it keeps
    within noise)."""
    ref = forest_reference(scorer, base, players, k, higher_is_better)
    kept = [int(i) for i in np.flatnonzero(ref["fractions"] > 0)]
    if ref["pool"] <= 0 or not significant(scorer, base, players, kept, higher_is_better):
        return None

    def against(fractions: np.ndarray, shares: np.ndarray) -> tuple[float, float]:
        error = float(np.max(np.abs(fractions - ref["fractions"]))) * 100.0
        a, b = ref["shares"], shares
        distinct = len(set(a)) > 1 and len(set(b)) > 1
        return error, float(spearmanr(a, b).statistic) if distinct else math.nan

    result = {"floor": against(ref["floor_fractions"], ref["floor_shares"])}
    game = stand_in_game(scorer, base, players, higher_is_better)
    result["stand-in"] = against(*paid_fractions(game.value, len(players)))
    return result
