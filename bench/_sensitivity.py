"""Shared by bench/evalscale.py (`--parts sensitivity`): how far the faithfulness reference itself
moves when the accepted data lose one row.

The faithfulness goal asks every surrogate share to be within 5 % of the pool of exact Shapley
with the model's own estimator. That is only a meaningful bar where the estimator's game is
settled to better than 5 % by the data. Here each paid batch of the faithfulness scenarios
(`scenario`, and `scale_scenario` at 10,000 or more accepted rows) is valued by exact Shapley
with the estimator twice more, each time with one accepted row left out (drawn with a fixed
seed). The contributions, the benchmark, the recipe and the seed are unchanged; no supplier
controls that row. Figures per batch: the largest paid-share move in % of the reference pool
and the Spearman correlation of the shares (`compare`), the worse of the two draws.

A surrogate cannot be expected to come closer to the reference than the reference is to
itself with one accepted row fewer, unless it reproduces the estimator's fit exactly (the
linear surrogate solves the estimator's own objective, pipeline.rewards.surrogate_fits).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from bench._faithfulness import FAMILIES, compare, datasets, scenario
from bench._faithfulness_scale import scale_scenario
from pipeline.evaluation.fit_engine import FitEngine
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.valuation import Player, ValuationSettings, value_batch

# Draws of the left-out row per batch; the worse move is kept.
DRAWS = 2


def one_row_moves(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: list[Player],
    seed: int,
    exact: ValuationSettings,
    higher_is_better: bool,
) -> tuple[float, float, float] | None:
    """(reference pool %, largest move % of pool, lowest Spearman) over `DRAWS` one-row-fewer
    valuations, or None when the reference pays nothing."""
    options: dict[str, Any] = {"settings": exact, "higher_is_better": higher_is_better}
    reference = value_batch(scorer, base, players, **options)
    if not reference.accepted or reference.pool_pct <= 0:
        return None
    moves, rhos = [], []
    for draw in range(DRAWS):
        left_out = int(np.random.default_rng(seed * 7 + draw).integers(len(base)))
        fewer = base.drop(index=base.index[left_out]).reset_index(drop=True)
        move, rho = compare(reference, value_batch(scorer, fewer, players, **options))
        moves.append(move)
        rhos.append(rho)
    kept = [r for r in rhos if not math.isnan(r)]
    return reference.pool_pct, max(moves), min(kept) if kept else math.nan


def _scenarios(
    family: str, accepted: int, sizes: list[int], seeds: int, first_seed: int
) -> Iterator[tuple[str, int, tuple[BenchmarkScorer, pd.DataFrame, list[Player]], int, bool]]:
    """(data name, players, scenario, seed, higher is better): the faithfulness table's small
    data sets when `accepted` is 0, else demo churn at `accepted` rows as `measure_scale`."""
    estimators = FAMILIES[family]
    data_sets = [] if accepted else datasets(estimators)  # loaded once, not per scenario
    for players in sizes:
        for seed in range(first_seed, first_seed + seeds):
            if accepted:
                built = scale_scenario(
                    accepted, players, 10 * players + seed, estimators["classification"]
                )
                yield f"churn {accepted:,} accepted", players, built, seed, True
                continue
            for data in data_sets:
                built = scenario(data, players, 1000 * players + seed)
                yield data.name, players, built, seed, data.metric != "rmse"


def measure_sensitivity(
    families: list[str],
    accepted_sizes: list[int],
    sizes: list[int],
    seeds: int,
    engine: FitEngine,
    on_row: Callable[[dict[str, Any]], None],
    first_seed: int = 0,
) -> dict[str, list[dict[str, Any]]]:
    """One row per paid batch, by family: the reference's one-row move. `accepted_sizes` holds
    0 for the small data sets and any accepted row counts for demo churn at scale."""
    exact = ValuationSettings(resamples=200, coalition_row_budget=10**12, engine=engine)
    found: dict[str, list[dict[str, Any]]] = {}
    for family in families:
        for accepted in accepted_sizes:
            for name, players, built, seed, hib in _scenarios(
                family, accepted, sizes, seeds, first_seed
            ):
                moved = one_row_moves(*built, seed, exact, hib)
                if moved is None:
                    continue
                pool, move, rho = moved
                recipe = built[0].recipe
                row = {
                    "accepted": accepted,
                    "data": name,
                    "estimator": recipe.estimator if recipe else "",
                    "players": players,
                    "seed": seed,
                    "pool_pct": pool,
                    "move": move,
                    "spearman": rho,
                }
                found.setdefault(family, []).append(row)
                on_row(row)
    return found
