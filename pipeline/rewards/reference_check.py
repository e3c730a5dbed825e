"""The reference check of a valuation made with the owner's training code (docs/rewards.md §2c).

A model trained by its owner's code (`pipeline.sandbox`) values contributions with code the
marketplace does not know: a trainer that learns only when a watermark row of a colluding
supplier is present gives that supplier the whole pool and an honest supplier of the same batch
nothing. So every valuation by owner code is also measured by the marketplace's own reference,
on the same rows, and a large disagreement holds the batch's payout for the operator
(`pipeline.rewards.holds`) instead of paying it:

- **Pool.** The reference estimator of the catalog (`REFERENCE_ESTIMATORS`: logistic
  regression, ridge; the catalog's preprocessing) is trained once on the rows "without" (the
  owner's base data and the accepted data) and once "with" (plus the contributions the owner's
  game kept: the set whose improvement is the pool). Its improvement is measured like the
  owner's (same benchmark, metric, floor). They disagree when
  |owner pool − reference pool| > max(`POOL_TOLERANCE_PP`, `POOL_TOLERANCE_RATIO` × |reference
  pool|): the owner's model may be better than a linear one, but not claim more than twice the
  reference's gain, or 5 points more, on the same rows.
- **Split.** The shares are split by the Shapley values of the surrogate game of
  `pipeline.rewards.surrogate` (a linear model per coalition from its parts' statistics: no
  model trained per coalition), over every contribution of the batch. Each side's split is
  its positive shares as fractions of their sum; the distance is the part of the pool the owner's
  split gives to other contributions than the reference's does (half the sum of absolute
  differences, 0 to 1). They disagree when it is above `SPLIT_TOLERANCE` and moves at least
  `SPLIT_MIN_MOVED_PP` points of improvement.

A batch of one has no split to compare; a side whose shares are all ≤ 0 has no split either
(the pool check speaks for it). A check that cannot measure the batch (the reference cannot be
trained on its rows) holds it too: the funder is not paid out on the owner's word alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from pipeline.evaluation.metrics import Predictions, improvement_denominator, metric_score
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.players import Player
from pipeline.rewards.shapley import (
    coalitions_needed,
    exact_shapley,
    kernel_shapley,
    sampling_budget,
)
from pipeline.rewards.surrogate import SurrogateGame
from pipeline.rewards.valuation import SHARE_REJECTED, BatchValuation, ValuationSettings

REFERENCE_ESTIMATORS = {"classification": "logistic_regression", "regression": "ridge"}
POOL_TOLERANCE_PP = 5.0
POOL_TOLERANCE_RATIO = 1.0
SPLIT_TOLERANCE = 0.3
SPLIT_MIN_MOVED_PP = 1.0


@dataclass(frozen=True)
class ReferenceCheck:
    """What the reference measured of one valuation, and whether it disputes the owner's."""

    estimator: str
    owner_pool_pct: float
    reference_pool_pct: float | None  # None: the check could not measure it (`error`)
    split_distance: float | None  # None: nothing to compare (one contribution, no positive share)
    pool_disagrees: bool
    split_disagrees: bool
    # The check could not measure the batch (the error's type): that holds the payout too.
    error: str | None = None

    @classmethod
    def failed(cls, estimator: str, owner_pool_pct: float, error: str) -> ReferenceCheck:
        return cls(estimator, owner_pool_pct, None, None, False, False, error)

    @property
    def holds(self) -> bool:
        return self.pool_disagrees or self.split_disagrees or self.error is not None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "holds": self.holds}

    def describe(self) -> str:
        """The figures, for the job's reason and Dagster: numbers only, no owner text."""
        if self.error is not None or self.reference_pool_pct is None:
            return f"the reference {self.estimator} could not measure it: {self.error}"
        text = (
            f"pool {self.owner_pool_pct:+.2f} % by the model's training code, "
            f"{self.reference_pool_pct:+.2f} % by the reference {self.estimator}"
        )
        if self.split_distance is not None:
            text += f"; the splits differ by {self.split_distance:.0%} of the pool"
        return text


def check_valuation(
    scorer: BenchmarkScorer,
    base: pd.DataFrame | None,
    players: Sequence[Player],
    valuation: BatchValuation,
    *,
    settings: ValuationSettings,
) -> ReferenceCheck:
    """Measure `valuation` (made by the owner's code through `scorer`) with the reference."""
    base = base if base is not None else pd.DataFrame()
    estimator = REFERENCE_ESTIMATORS[scorer.task_type]
    higher = valuation.direction == "higher_is_better"
    reference = _reference_pool(scorer, estimator, base, players, valuation, settings, higher)
    tolerance = max(POOL_TOLERANCE_PP, POOL_TOLERANCE_RATIO * abs(reference))
    distance = _split_distance(scorer, base, players, valuation, settings, higher)
    moved = 0.0 if distance is None else distance * abs(valuation.pool_pct)
    return ReferenceCheck(
        estimator=estimator,
        owner_pool_pct=valuation.pool_pct,
        reference_pool_pct=reference,
        split_distance=distance,
        pool_disagrees=abs(valuation.pool_pct - reference) > tolerance,
        split_disagrees=(
            distance is not None and distance > SPLIT_TOLERANCE and moved >= SPLIT_MIN_MOVED_PP
        ),
    )


def _reference_pool(
    scorer: BenchmarkScorer,
    estimator: str,
    base: pd.DataFrame,
    players: Sequence[Player],
    valuation: BatchValuation,
    settings: ValuationSettings,
    higher: bool,
) -> float:
    """The reference's improvement with the contributions the owner's game kept: two fits."""
    reference = BenchmarkScorer(
        scorer.bench,
        task_type=scorer.task_type,
        estimator=estimator,
        target_column=scorer.target_column,
        input_columns=scorer.input_columns or None,
        metric_name=scorer.metric.name,
        # Measured as the owner's pool is (on the same K paired fits): a pool of one fit would
        # differ from it by the very noise the owner's K fits average away.
        paired_fits=scorer.paired_fits,
    )
    kept = [p.frame for p in players if valuation.rejected.get(p.key) != SHARE_REJECTED]
    with_rows = pd.concat([f for f in (base, *kept) if len(f)], ignore_index=True)
    without, with_ = settings.engine.predict_many(reference, [base, with_rows])
    return _improvement(without, with_, scorer.floor, higher)


def _improvement(without: Predictions, with_: Predictions, floor: float, higher: bool) -> float:
    score_without = metric_score(without)
    gain = metric_score(with_) - score_without
    return (gain if higher else -gain) / improvement_denominator(score_without, floor) * 100.0


def _split_distance(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: Sequence[Player],
    valuation: BatchValuation,
    settings: ValuationSettings,
    higher: bool,
) -> float | None:
    """The part of the pool the owner's split gives elsewhere than the reference's (0 to 1)."""
    if len(players) < 2:
        return None
    game = SurrogateGame(
        scorer,
        base,
        [p.frame for p in players],
        max_base_rows=settings.surrogate_max_base_rows,
        higher_is_better=higher,
    )
    units = list(range(len(players)))
    game.prepare(coalitions_needed(units, settings.exact_max_players, settings.shapley_budget))
    if len(units) <= settings.exact_max_players:
        values = exact_shapley(units, game.value)
    else:
        values = kernel_shapley(
            units, game.value, sampling_budget(len(units), settings.shapley_budget)
        )
    owner = _fractions([valuation.shares.get(p.key, 0.0) for p in players])
    reference = _fractions([values[i] for i in units])
    if owner is None or reference is None:
        return None
    return math.fsum(abs(a - b) for a, b in zip(owner, reference, strict=True)) / 2


def _fractions(shares: Sequence[float]) -> list[float] | None:
    """Positive shares as fractions of their sum; None when none is positive."""
    positive = [max(share, 0.0) for share in shares]
    total = math.fsum(positive)
    if not total > 0:
        return None
    return [share / total for share in positive]
