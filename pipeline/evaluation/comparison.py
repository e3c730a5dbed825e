"""The with/without comparison that measures a contribution.

A contribution is measured by training the model's estimator twice on the same benchmark: once
on the base training rows alone ("without") and once on the base rows plus the contribution
("with"). Both runs use fixed seeds, so the same inputs always give the same scores.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Unpack

import pandas as pd

from pipeline.evaluation.metrics import (
    Direction,
    improvement_pct,
    validate_direction,
    validate_metric,
)
from pipeline.evaluation.scorer import BenchmarkScorer, ScoringOptions


@dataclass(frozen=True)
class EvaluationResult:
    score_with: float
    score_without: float
    improvement_pct: float
    metric_name: str
    direction: Direction
    train_rows_with: int
    train_rows_without: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate_contribution(
    base_train_df: pd.DataFrame | None,
    contribution_df: pd.DataFrame,
    benchmark_df: pd.DataFrame,
    *,
    metric_direction: str,
    **options: Unpack[ScoringOptions],
) -> EvaluationResult:
    """Score the model without and with the contribution's rows, and the improvement between.

    "without" trains on `base_train_df` alone (the trivial baseline when it has no rows);
    "with" trains on the base rows followed by the contribution's rows. The improvement is
    measured against the metric's floor (`pipeline.evaluation.metrics.improvement_floor`).
    """
    metric_name, target_column = options["metric_name"], options["target_column"]
    validate_metric(metric_name, metric_direction, options["task_type"])
    scorer = BenchmarkScorer(benchmark_df, **options)
    frames = [f for f in (base_train_df, contribution_df) if f is not None and len(f)]
    without_df = base_train_df if base_train_df is not None else pd.DataFrame()
    with_df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    score_without = scorer.score(without_df)
    score_with = scorer.score(with_df)
    return EvaluationResult(
        score_with=score_with,
        score_without=score_without,
        improvement_pct=improvement_pct(
            score_with, score_without, metric_direction, floor=scorer.floor
        ),
        metric_name=metric_name,
        direction=validate_direction(metric_direction),
        train_rows_with=_labelled_count(with_df, target_column),
        train_rows_without=_labelled_count(without_df, target_column),
    )


def _labelled_count(frame: pd.DataFrame, target_column: str) -> int:
    if target_column not in frame.columns:
        return 0
    return int(frame[target_column].notna().sum())
