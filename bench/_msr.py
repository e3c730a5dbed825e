"""Shared by bench/msr_split.py: a candidate split of a tree model's pool (issue 35),
coordinated bagging of contributions, valued by Data Banzhaf's maximum-sample-reuse (MSR)
estimator (Wang & Jia 2023) on the model's own estimator.

Fit m (m = 0..M-1) trains on the accepted rows of the model's paired fit m mod K (its keyed
folds, `pipeline.models.paired_fits.paired_mask`) plus the contributions whose keyed coin for
fit m is heads: `keyed_uniform(key, COIN_SALT + m) < 1/2`, the key drawn from the
contribution's rows (`frame_fingerprints`), never from its position or count. Each fit runs
under paired fit m's own seed (`BenchmarkScorer.predict_fit`) and is scored with the model's
metric on the benchmark. Copies have one key, so they are always in or out together.

- **Banzhaf (MSR)**: phi_i = mean(score | i in) - mean(score | i out), over all M fits. A
  contribution with phi <= 0 is rejected; the rest share the pool in proportion to phi (one
  round: the rest's values are not estimated again without the rejected).
- **MSR-Shapley**: the M fits estimate each coalition's mean score (the fits whose heads are
  exactly it), and exact Shapley is played on those means in rounds, as the service plays
  (`_expected_game.paid_fractions`). A coalition no fit drew gets the additive least-squares
  model of all M fits (intercept plus one effect per contribution) at that coalition.

The pool is the service's: the model's K paired fits with the kept contributions over the
cached "without", with its bootstrap interval (`as_valuation`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from bench import _references
from bench._expected_game import paid_fractions
from pipeline.evaluation.metrics import Predictions, metric_score
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.paired_fits import paired_mask
from pipeline.models.row_keys import keyed_uniform
from pipeline.rewards.interval import improvement_interval
from pipeline.rewards.players import frame_fingerprints
from pipeline.rewards.shapley import Coalition
from pipeline.rewards.valuation import (
    NOISE,
    SHARE_REJECTED,
    BatchValuation,
    Player,
    ValuationSettings,
)

# Fit m's coin salt is COIN_SALT + m: far from the folds' PAIRED_SALT, the references' FIT_SALT
# and the small salts of a forest's trees.
COIN_SALT = 0x6D73_725F_636F_0000  # "msr_co" in ASCII
BANZHAF = "msr_banzhaf"
SHAPLEY = "msr_shapley"


def contribution_keys(players: Sequence[Player]) -> np.ndarray:
    """One uint64 per contribution, from its rows' fingerprint (its content only)."""
    found = frame_fingerprints([p.frame for p in players])
    return np.asarray([int(f[:16], 16) for f in found], dtype=np.uint64)


def coins(keys: np.ndarray, fits: int) -> np.ndarray:
    """(fits, players) booleans: whether contribution i is in fit m (module docstring)."""
    return np.stack([keyed_uniform(keys, COIN_SALT + m) < 0.5 for m in range(fits)])


def fold_masks(scorer: BenchmarkScorer, base: pd.DataFrame, paired: int) -> list[np.ndarray]:
    """Which accepted rows paired fit k of `paired` keeps, for each k (its keyed folds)."""
    keys = _references.accepted_keys(scorer, base)
    return [paired_mask(keys, k, paired) for k in range(paired)]


def fit_scores(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: Sequence[Player],
    included: np.ndarray,
    paired: int,
    fits: range,
    workers: int = 2,
) -> np.ndarray:
    """The benchmark score of each fit m in `fits` (module docstring; `included[m]`: its
    contributions), in order."""
    train = scorer.labelled(base)
    masks = fold_masks(scorer, base, paired)
    run = Parallel(n_jobs=max(workers, 1), backend="threading")
    scores = np.full(len(fits), np.nan)
    chunk = max(2 * workers, 1)
    for start in range(fits.start, fits.stop, chunk):
        part = range(start, min(start + chunk, fits.stop))
        heads = [[players[int(i)].frame for i in np.flatnonzero(included[m])] for m in part]
        frames = [
            pd.concat([train[masks[m % paired]], *h], ignore_index=True)
            for m, h in zip(part, heads, strict=True)
        ]
        calls = [delayed(scorer.predict_fit)(f, m) for f, m in zip(frames, part, strict=True)]
        for m, predictions in zip(part, run(calls), strict=True):
            scores[m - fits.start] = metric_score(predictions)
    return scores


def banzhaf(included: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """MSR's Banzhaf value of each player: mean score with it minus without it (0 for a player
    the fits never had on one side)."""
    values = np.zeros(included.shape[1])
    for i in range(included.shape[1]):
        inside, outside = scores[included[:, i]], scores[~included[:, i]]
        if len(inside) and len(outside):
            values[i] = inside.mean() - outside.mean()
    return values


def coalition_means(included: np.ndarray, scores: np.ndarray) -> dict[Coalition, float]:
    """Every coalition's mean score over the fits that drew exactly it; a coalition none drew
    gets the additive least-squares model of all the fits (module docstring)."""
    n = included.shape[1]
    design = np.column_stack([np.ones(len(scores)), included.astype(float)])
    coefficients = np.linalg.lstsq(design, scores, rcond=None)[0]
    means: dict[Coalition, float] = {}
    for size in range(n + 1):
        for members in combinations(range(n), size):
            drawn = np.all(included == np.isin(np.arange(n), members), axis=1)
            additive = coefficients[0] + sum(coefficients[1 + i] for i in members)
            means[frozenset(members)] = float(scores[drawn].mean()) if drawn.any() else additive
    return means


def banzhaf_fractions(values: np.ndarray) -> np.ndarray:
    """Each player's fraction of the pool: positive values in proportion, the rest 0."""
    kept = np.where(values > 0, values, 0.0)
    total = kept.sum()
    return kept / total if total > 0 else kept


def shapley_fractions(included: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Exact Shapley in rounds on the coalitions' mean scores (module docstring)."""
    means = coalition_means(included, scores)
    empty = means[frozenset()]
    return paid_fractions(lambda c: means[c] - empty, included.shape[1])[0]


def split(method: str, included: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fractions of the pool, values in score units) of `method` on the fits given."""
    if method == BANZHAF:
        values = banzhaf(included, scores)
        return banzhaf_fractions(values), values
    fractions = shapley_fractions(included, scores)
    return fractions, fractions  # a rejected player's Shapley value is not kept: 0


def as_valuation(
    deployed: BatchValuation,
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: Sequence[Player],
    fractions: np.ndarray,
    values: np.ndarray,
    settings: ValuationSettings,
    method: str,
    withs: dict[frozenset[str], Predictions],
) -> BatchValuation:
    """`deployed` with the candidate's split: the kept players (fraction > 0) share the pool of
    the model's paired fits trained with them over `deployed`'s "without", and the pool is
    paid when its interval is above 0, as `value_batch` does. `withs` caches those fits by the
    kept players' keys (seed it with the deployed "with")."""
    assert deployed.without is not None
    keys = [p.key for p in players]
    kept = frozenset(k for k, f in zip(keys, fractions, strict=True) if f > 0)
    rejected = {k: SHARE_REJECTED for k in keys if k not in kept}
    scale = 100.0 / deployed.denominator
    shares = {k: min(float(v) * scale, 0.0) for k, v in zip(keys, values, strict=True)}
    if not kept:
        return dataclasses.replace(
            deployed,
            pool_pct=0.0,
            interval=None,
            method=method,
            accepted=[],
            rejected=rejected,
            shares=shares,
            with_predictions=None,
            stability=None,
        )
    if kept not in withs:
        frames = [base, *(p.frame for p in players if p.key in kept)]
        withs[kept] = scorer.predict(pd.concat(frames, ignore_index=True))
    with_predictions = withs[kept]
    score_with = metric_score(with_predictions)
    pool = (score_with - deployed.score_without) * scale
    interval = improvement_interval(
        deployed.without,
        with_predictions,
        higher_is_better=True,  # the scenario's metric is accuracy
        denominator=deployed.denominator,
        resamples=settings.resamples,
        level=settings.level,
    )
    shares.update({k: float(f) * pool for k, f in zip(keys, fractions, strict=True) if k in kept})
    if not interval.low > 0:
        rejected.update(dict.fromkeys(kept, NOISE))
    return dataclasses.replace(
        deployed,
        score_with=score_with,
        pool_pct=pool,
        interval=interval,
        method=method,
        accepted=[k for k in keys if k in kept and k not in rejected],
        rejected=rejected,
        shares=shares,
        with_predictions=with_predictions,
        with_keys=tuple(sorted(kept)),
        stability=None,
    )
