"""Label checks: does a contribution's target agree with the model and with itself?

Two rates are measured on the contribution's rows and compared with the same rates on the
*reference* data (the model's accepted rows; the benchmark's evaluation rows while fewer than
`MIN_REFERENCE_ROWS` rows are accepted — the benchmark then only serves to measure, its rows are
never training data):

- against the current model: a model trained on the reference predicts the contribution's
  rows; its *reference* rate is the same model's out-of-fold rate on the reference itself;
- against itself: out-of-fold predictions within the contribution (k-fold cross-validation);
  its reference rate is the same cross-validation on a reference sample of the same size.

The rate is, for classification, the share of rows whose label differs from the prediction;
for regression, 1 - R² of the given targets against the predictions (the share of the targets'
variance the predictions leave unexplained; targets shrunk towards their mean, permuted or
noised push it up). Regression rates vary about twice as much between samples of a few hundred
rows, so their margin is twice as wide.

A contribution is quarantined when its labels disagree with the model by more than `margin`
beyond the reference (plus three binomial standard errors for classification) *and* disagree
with themselves by more than that too (random or targeted label noise), or when they disagree
with the model by more than twice the margin on their own (labels inverted or shrunk: noise
that is consistent with itself). A coherent new concept that the current model merely gets
wrong passes unless it contradicts the model that strongly.

Estimators are the model's own (`pipeline.models.estimators`), seeded; at most `MAX_ROWS` rows of
each side are used, drawn with a fixed seed, so the check costs at most ten fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipeline.checks.canonical_cells import canonical_text
from pipeline.core.errors import DomainError
from pipeline.models.estimators import Recipe, build_estimator

FOLDS = 3
MAX_ROWS = 2_000
MIN_ROWS = 20
MIN_REFERENCE_ROWS = 100
SEED = 0


@dataclass(frozen=True)
class LabelReport:
    task_type: str
    reference: str  # "accepted data" | "benchmark"
    rows: int
    disagreement: float  # with the model trained on the reference
    reference_disagreement: float  # that model's out-of-fold rate on the reference
    self_disagreement: float | None  # the contribution's own cross-validation
    self_reference: float | None  # the same cross-validation on a reference sample
    threshold: float  # excess above the reference that counts
    quarantined: bool

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    def summary(self) -> str:
        what = "labels" if self.task_type == "classification" else "targets (1 - R²)"
        text = (
            f"{what} disagree with the current model on {_pct(self.disagreement)} "
            f"(reference {_pct(self.reference_disagreement)}, {self.reference})"
        )
        if self.self_disagreement is not None and self.self_reference is not None:
            text += (
                f" and with their own cross-validated predictions on "
                f"{_pct(self.self_disagreement)} (reference {_pct(self.self_reference)})"
            )
        return text


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def canonical_labels(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Class labels in one comparable form: numbers as floats (1, "1", True → 1.0), else text."""
    out: list[float | str] = []
    for value in values:
        if isinstance(value, bool | np.bool_):
            out.append(float(value))
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            out.append(canonical_text(str(value)))
            continue
        out.append(number if math.isfinite(number) else str(value))
    if all(isinstance(v, float) for v in out):
        return np.asarray(out, dtype=np.float64)
    return np.asarray([str(v) for v in out], dtype=object)


def _prepare(
    frame: pd.DataFrame, features: Sequence[str], target: str, task_type: str
) -> tuple[pd.DataFrame, np.ndarray]:
    rows = frame[frame[target].notna()] if target in frame.columns else frame.iloc[0:0]
    x = rows.reindex(columns=list(features))
    if task_type == "regression":
        y = pd.to_numeric(rows[target], errors="coerce").to_numpy(dtype=np.float64)
        keep = np.isfinite(y)
        return x[keep].reset_index(drop=True), y[keep]
    return x.reset_index(drop=True), canonical_labels(rows[target].tolist())


def _sample(x: pd.DataFrame, y: np.ndarray, size: int) -> tuple[pd.DataFrame, np.ndarray]:
    if len(y) <= size:
        return x, y
    rows = np.sort(np.random.default_rng(SEED).choice(len(y), size, replace=False))
    return x.iloc[rows].reset_index(drop=True), y[rows]


def _rate(task_type: str, y: np.ndarray, predicted: np.ndarray) -> float:
    if task_type == "classification":
        return float(np.mean(y != predicted))
    # sklearn (over a second to import) stays lazy: the API imports this module (integrity).
    from sklearn.metrics import r2_score

    return float(1.0 - r2_score(y, predicted.astype(np.float64)))


def _splitter(task_type: str, y: np.ndarray) -> Any | None:
    # sklearn (over a second to import) stays lazy: the API imports this module (integrity).
    from sklearn.model_selection import KFold, StratifiedKFold

    if task_type == "classification":
        _, counts = np.unique(y.astype(str), return_counts=True)
        if len(counts) < 2:
            return None
        if counts.min() >= FOLDS:
            return StratifiedKFold(FOLDS, shuffle=True, random_state=SEED)
    return KFold(FOLDS, shuffle=True, random_state=SEED)


def _out_of_fold(
    task_type: str, estimator: str | Recipe, x: pd.DataFrame, y: np.ndarray
) -> np.ndarray | None:
    """Out-of-fold predictions, None when the rows cannot be cross-validated."""
    # sklearn (over a second to import) stays lazy: the API imports this module (integrity).
    from sklearn.model_selection import cross_val_predict

    splitter = _splitter(task_type, y)
    if splitter is None or len(y) < MIN_ROWS:
        return None
    try:
        predicted: np.ndarray = cross_val_predict(
            # The smallest training fold bounds a neighbours estimator's k.
            build_estimator(estimator, task_type, rows=len(y) - len(y) // FOLDS - 1),
            x,
            y,
            cv=splitter,
        )
    except ValueError:
        # A fold without one of the classes, or columns a fold holds no value of.
        return None
    return predicted


def _self_rates(
    task_type: str,
    estimator: str | Recipe,
    reference: tuple[pd.DataFrame, np.ndarray],
    contribution: tuple[pd.DataFrame, np.ndarray],
) -> tuple[float | None, float | None]:
    """Out-of-fold disagreement of the contribution with itself, and of as many reference rows
    with themselves; (None, None) when either cannot be measured."""
    con_x, con_y = contribution
    own_oof = _out_of_fold(task_type, estimator, con_x, con_y)
    if own_oof is None:
        return None, None
    same_x, same_y = _sample(*reference, len(con_y))
    same_oof = _out_of_fold(task_type, estimator, same_x, same_y)
    if same_oof is None:
        return None, None
    return _rate(task_type, con_y, own_oof), _rate(task_type, same_y, same_oof)


def check_labels(
    reference: pd.DataFrame,
    contribution: pd.DataFrame,
    *,
    task_type: str,
    estimator: str | Recipe,
    features: Sequence[str],
    target: str,
    margin: float,
    reference_name: str,
) -> LabelReport | None:
    """Measure (see the module docstring); None when there is too little to measure."""
    features = [c for c in features if c in reference.columns and c in contribution.columns]
    if not features:
        return None
    ref_x, ref_y = _sample(*_prepare(reference, features, target, task_type), MAX_ROWS)
    con_x, con_y = _sample(*_prepare(contribution, features, target, task_type), MAX_ROWS)
    if len(con_y) < MIN_ROWS or len(ref_y) < MIN_ROWS:
        return None
    if task_type == "classification" and len(set(ref_y.tolist())) < 2:
        return None
    if task_type == "classification" and ref_y.dtype != con_y.dtype:
        # Numeric labels on one side and text on the other: nothing can agree.
        ref_y, con_y = ref_y.astype(str).astype(object), con_y.astype(str).astype(object)
    reference_oof = _out_of_fold(task_type, estimator, ref_x, ref_y)
    if reference_oof is None:
        return None
    model = build_estimator(estimator, task_type, rows=len(ref_y))
    try:
        model.fit(ref_x, ref_y)
    except ValueError as exc:
        raise DomainError("the label check could not train on the reference data") from exc
    disagreement = _rate(task_type, con_y, model.predict(con_x))
    reference_rate = _rate(task_type, ref_y, reference_oof)

    self_rate, self_reference = _self_rates(task_type, estimator, (ref_x, ref_y), (con_x, con_y))
    width = margin if task_type == "classification" else 2 * margin
    slack = 0.0
    if task_type == "classification":
        spread = max(reference_rate, 1 / len(ref_y)) * (1 - reference_rate)
        slack = 3 * math.sqrt(spread / len(con_y))
    threshold = width + slack
    excess = disagreement - reference_rate
    self_excess = (
        self_rate - self_reference if self_rate is not None and self_reference is not None else None
    )
    quarantined = excess > width * 2 + slack or (
        excess > threshold and (self_excess is None or self_excess > threshold)
    )
    return LabelReport(
        task_type=task_type,
        reference=reference_name,
        rows=len(con_y),
        disagreement=disagreement,
        reference_disagreement=reference_rate,
        self_disagreement=self_rate,
        self_reference=self_reference,
        threshold=threshold,
        quarantined=quarantined,
    )
