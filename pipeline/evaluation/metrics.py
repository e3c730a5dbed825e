"""Benchmark metrics: their directions, the improvement between two scores, and the metric of
a fitted model's predictions (once, or under many resample weights at once).

Metrics (`METRICS`), each with its task type and natural direction:

- ``accuracy``: share of benchmark rows predicted exactly.
- ``f1``: when the benchmark target has exactly two classes, the F1 of the positive class, which
  is the larger of the two labels in sort order (1 of 0/1, True of False, "yes" of "no");
  otherwise the unweighted (macro) mean of per-class F1 over the classes present in the
  benchmark or the predictions. An undefined precision or recall counts as 0.
- ``roc_auc``: binary as for f1, ranked by the predicted probability of the positive class;
  with three or more benchmark classes, one-vs-rest macro average. Probability mass the model
  puts on classes the benchmark lacks is dropped and each row renormalised. A constant predictor
  scores 0.5.
- ``rmse``, ``mae``, ``r2``: regression, as scikit-learn defines them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

import numpy as np

from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.models.estimators import TaskType, validate_task_type

Direction = Literal["higher_is_better", "lower_is_better"]
DIRECTIONS: tuple[Direction, ...] = get_args(Direction)

# A baseline this close to zero is treated as zero: dividing by it would turn float noise
# into an arbitrarily large percentage.
ZERO_BASELINE = 1e-12


@dataclass(frozen=True)
class Metric:
    name: str
    task_type: TaskType
    direction: Direction
    # roc_auc ranks by predicted probabilities rather than comparing predicted labels.
    uses_probabilities: bool = False


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("accuracy", "classification", "higher_is_better"),
        Metric("f1", "classification", "higher_is_better"),
        Metric("roc_auc", "classification", "higher_is_better", uses_probabilities=True),
        Metric("rmse", "regression", "lower_is_better"),
        Metric("mae", "regression", "lower_is_better"),
        Metric("r2", "regression", "higher_is_better"),
    )
}


def validate_direction(direction: str) -> Direction:
    if direction not in DIRECTIONS:
        raise InvalidInput(
            f"unknown metric_direction {direction!r}; expected one of {', '.join(DIRECTIONS)}"
        )
    return direction


def validate_metric(
    metric_name: str, metric_direction: str, task_type: str | None = None
) -> Metric:
    """Check a benchmark's metric settings; returns the metric.

    Rejects an unknown metric or direction, a direction that contradicts the metric's natural
    one (an "rmse, higher_is_better" benchmark would reward contributions that make the model
    worse), and, when the model's task type is given, a metric for the other task type.
    """
    metric = METRICS.get(metric_name)
    if metric is None:
        raise InvalidInput(
            f"unknown metric_name {metric_name!r}; expected one of {', '.join(METRICS)}"
        )
    validate_direction(metric_direction)
    if metric_direction != metric.direction:
        raise InvalidInput(
            f"metric {metric_name!r} is {metric.direction}; "
            f"metric_direction {metric_direction!r} contradicts it"
        )
    if task_type is not None and validate_task_type(task_type) != metric.task_type:
        raise InvalidInput(
            f"metric {metric_name!r} is a {metric.task_type} metric; the model is {task_type}"
        )
    return metric


# Denominator floors of the improvement (see `improvement_floor`). Bounded metrics whose best
# value is 1: a score-rate metric is never divided by less than a coin flip's 0.5; r2, whose
# trivial baseline is 0, is counted in points (a relative change of r2 means nothing).
BOUNDED_FLOORS: dict[str, float] = {"accuracy": 0.5, "f1": 0.5, "roc_auc": 0.5, "r2": 1.0}


def improvement_floor(metric_name: str, y_true: Any) -> float:
    """The smallest denominator an improvement of `metric_name` is measured against.

    accuracy, f1, roc_auc: 0.5; r2: 1.0 (points); rmse and mae: the error of the constant
    mean predictor on the benchmark targets `y_true` (their standard deviation, resp. mean
    absolute deviation), so an improvement is at most measured in units of the target's spread.
    """

    if metric_name in BOUNDED_FLOORS:
        return BOUNDED_FLOORS[metric_name]
    y = np.asarray(y_true, dtype="float64")
    if not len(y):
        return 0.0
    if metric_name == "rmse":
        return float(np.std(y))
    if metric_name == "mae":
        return float(np.mean(np.abs(y - y.mean())))
    raise InvalidInput(f"unknown metric_name {metric_name!r}")


def improvement_denominator(without_score: float, floor: float = 0.0) -> float:
    """max(|without|, floor); 1 (score points) when that is zero."""
    denominator = max(abs(without_score), floor)
    return denominator if denominator >= ZERO_BASELINE else 1.0


def improvement_pct(
    with_score: float, without_score: float, direction: str, floor: float = 0.0
) -> float:
    """Change from `without_score` to `with_score` in percent, positive when better.

    higher_is_better: (with - without) / max(|without|, floor) * 100;
    lower_is_better:  (without - with) / max(|without|, floor) * 100.
    A zero denominator has no relative change, so the difference in score points counts
    instead: (with - without) * 100, sign as above; r2 rising from 0.0 to 0.25 is 25 %.
    `floor` (see `improvement_floor`) keeps a sabotaged or near-zero baseline from turning a
    modest gain into thousands of percent.
    """
    validate_direction(direction)
    if not (math.isfinite(with_score) and math.isfinite(without_score)):
        raise InvalidInput("scores must be finite numbers")
    gain = with_score - without_score
    if direction == "lower_is_better":
        gain = -gain
    return gain / improvement_denominator(without_score, floor) * 100.0


@dataclass(frozen=True)
class Predictions:
    """One fitted model's outputs on every benchmark row, in benchmark order.

    `outputs` holds predicted labels (accuracy, f1) or values (regression); for roc_auc, one
    score column per benchmark class (`classes`, in sort order). A metric, and each bootstrap
    resample of it, is computed from these without refitting.
    """

    metric_name: str
    y_true: np.ndarray
    outputs: np.ndarray
    classes: tuple[Any, ...] = ()
    # Paired fits (a model's `paired_fits`): the arrays hold `copies` blocks of the benchmark
    # rows, block k predicted by fit k, so a metric that is a mean over rows is the fits' mean.
    copies: int = 1


def metric_score(predictions: Predictions) -> float:
    """The metric of `predictions` over all benchmark rows, as scikit-learn computes it."""
    name = predictions.metric_name
    y_true, outputs = predictions.y_true, predictions.outputs
    if METRICS[name].task_type == "regression":
        return _regression_score(name, y_true, outputs)
    try:
        if METRICS[name].uses_probabilities:
            return _roc_auc(y_true, predictions.classes, outputs)
        return _label_score(name, y_true, outputs)
    except (TypeError, ValueError) as exc:
        # sklearn's messages may quote label values: the detail stays value-free and the
        # original is chained for the logs.
        raise Unprocessable(
            f"cannot compute {name}: the training and benchmark targets are not "
            "comparable (labels of different types?)"
        ) from exc


def stack_copies(fits: list[Predictions]) -> Predictions:
    """The predictions of paired fits (each on every benchmark row, one copy each) as one:
    block k is fit k's, `copies` their count."""
    first = fits[0]
    if len(fits) == 1:
        return first
    return Predictions(
        first.metric_name,
        np.concatenate([f.y_true for f in fits]),
        np.concatenate([f.outputs for f in fits]),
        first.classes,
        copies=len(fits),
    )


def copy_block(predictions: Predictions, copy: int) -> Predictions:
    """The predictions of paired fit `copy` alone (one copy)."""
    rows = benchmark_rows(predictions)
    block = slice(copy * rows, (copy + 1) * rows)
    return replace(
        predictions,
        y_true=predictions.y_true[block],
        outputs=predictions.outputs[block],
        copies=1,
    )


def benchmark_rows(predictions: Predictions) -> int:
    """How many benchmark rows `predictions` cover (their length over their copies)."""
    rows, copies = len(predictions.y_true), predictions.copies
    if copies < 1 or rows % copies:
        raise ValueError(f"{rows} predicted rows are not {copies} copies of the benchmark")
    return rows // copies


def copy_scores(predictions: Predictions) -> np.ndarray:
    """The metric of each paired fit's block of `predictions` (one value per copy)."""
    return np.asarray(
        [metric_score(copy_block(predictions, k)) for k in range(predictions.copies)],
        dtype="float64",
    )


def metric_samples(predictions: Predictions, weights: np.ndarray) -> np.ndarray:
    """The metric under each row of `weights` (resamples x benchmark rows, e.g. bootstrap
    counts), vectorised: one value per resample.

    With a row of ones it equals `metric_score`. Classes for f1 are those of the whole
    benchmark and predictions; a class absent from a resample is left out of its macro mean,
    as scikit-learn would. A resample without both classes has no roc_auc (NaN).
    """

    w = np.asarray(weights, dtype="float64")
    total = w.sum(axis=1)
    name = predictions.metric_name
    y_true, outputs = predictions.y_true, predictions.outputs
    if METRICS[name].task_type == "regression":
        y = y_true.astype("float64")
        errors = y - outputs
        if name == "mae":
            return np.asarray((w @ np.abs(errors)) / total)
        squared = (w @ (errors * errors)) / total
        if name == "rmse":
            return np.asarray(np.sqrt(squared))
        mean = (w @ y) / total
        spread = (w @ (y * y)) / total - mean * mean
        with np.errstate(divide="ignore", invalid="ignore"):
            r2 = 1.0 - squared / spread
        # scikit-learn's convention for a constant target: 1 when predicted exactly, else 0.
        return np.where(spread > 0, r2, np.where(squared == 0, 1.0, 0.0))
    if name == "accuracy":
        return np.asarray((w @ np.asarray(y_true == outputs, dtype="float64")) / total)
    if name == "roc_auc":
        classes = predictions.classes
        if len(classes) == 2:
            return _weighted_auc(w, np.asarray(y_true == classes[1]), outputs[:, 1])
        per_class = [
            _weighted_auc(w, np.asarray(y_true == c), outputs[:, i]) for i, c in enumerate(classes)
        ]
        return np.asarray(np.mean(np.column_stack(per_class), axis=1))
    return _weighted_f1(w, y_true, outputs, predictions.classes)


def value_columns(metric_name: str, y_true: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """A regression metric of each column of `outputs` (rows x predictors) at once: as
    `metric_samples` with a row of ones, per column."""
    y = y_true.astype("float64")
    ones = np.ones(len(y))
    errors = y[:, None] - outputs
    if metric_name == "mae":
        return np.asarray((ones @ np.abs(errors)) / len(y))
    squared = (ones @ (errors * errors)) / len(y)
    if metric_name == "rmse":
        return np.asarray(np.sqrt(squared))
    mean = (ones @ y) / len(y)
    spread = (ones @ (y * y)) / len(y) - mean * mean
    if spread > 0:
        return np.asarray(1.0 - squared / spread)
    return np.where(squared == 0, 1.0, 0.0)


def code_columns(
    metric_name: str, y_codes: np.ndarray, predicted: np.ndarray, labels: int, positive: int | None
) -> np.ndarray:
    """accuracy or f1 of each column of `predicted` (rows x predictors) at once, on integer
    label codes (0 .. labels − 1, the same code for the same label in `y_codes`): as
    `metric_samples` with a row of ones, without labels as objects. `positive`: the code of
    the benchmark's positive class when it has two (binary f1), else None (macro f1 over the
    labels present in the truth or the predictions)."""
    if metric_name == "accuracy":
        return np.asarray(np.mean(predicted == y_codes[:, None], axis=0))
    scores, present = [], []
    for label in [positive] if positive is not None else range(labels):
        truth, said = (y_codes == label)[:, None], predicted == label
        tp = np.count_nonzero(truth & said, axis=0).astype("float64")
        denominator = 2 * tp + np.count_nonzero(truth ^ said, axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            scores.append(np.where(denominator > 0, 2 * tp / denominator, 0.0))
        present.append(denominator > 0)
    if positive is not None:
        return scores[0]
    counted = np.vstack(present)
    return np.asarray(np.sum(np.vstack(scores) * counted, axis=0) / np.maximum(counted.sum(0), 1))


def _weighted_f1(
    w: np.ndarray, y_true: np.ndarray, y_pred: np.ndarray, classes: tuple[Any, ...]
) -> np.ndarray:

    if len(classes) == 2:
        labels: list[Any] = [classes[-1]]
    else:
        labels = sorted_labels(set(y_true) | set(y_pred))
    scores, present = [], []
    for label in labels:
        truth, said = np.asarray(y_true == label), np.asarray(y_pred == label)
        tp = w @ (truth & said).astype("float64")
        wrong = w @ (truth ^ said).astype("float64")  # false positives + false negatives
        denominator = 2 * tp + wrong
        with np.errstate(divide="ignore", invalid="ignore"):
            scores.append(np.where(denominator > 0, 2 * tp / denominator, 0.0))
        present.append(denominator > 0)
    if len(classes) == 2:
        return scores[0]
    counted = np.column_stack(present)
    total = np.sum(np.column_stack(scores) * counted, axis=1)
    return np.asarray(total / np.maximum(counted.sum(axis=1), 1))


def _weighted_auc(w: np.ndarray, positive: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Mann-Whitney AUC per weight row; tied scores count one half."""

    order = np.argsort(score, kind="mergesort")
    ranked = score[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    sorted_w = w[:, order]
    pos = np.add.reduceat(sorted_w * positive[order], starts, axis=1)
    neg = np.add.reduceat(sorted_w * ~positive[order], starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg
    pairs = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pairs > 0, (pos * (below + 0.5 * neg)).sum(axis=1) / pairs, np.nan)


def sorted_labels(labels: Any) -> list[Any]:
    try:
        return sorted(labels)
    except TypeError:
        raise Unprocessable("target labels mix types that cannot be ordered") from None


def _label_score(metric_name: str, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    # sklearn (over a second to import) stays lazy: the API and the CLI import METRICS.
    from sklearn.metrics import accuracy_score, f1_score

    if metric_name == "accuracy":
        if _integer_labels(y_true) and _integer_labels(y_pred) and len(y_true) == len(y_pred) > 0:
            # scikit-learn's checks pass on such labels, and its accuracy is then the share of
            # equal labels, as here (the same float): without its 1-2 ms of validation.
            return float(np.mean(y_true == y_pred))
        return float(accuracy_score(y_true, y_pred))
    classes = sorted_labels(set(y_true))
    if len(classes) == 2:
        positive = classes[-1]
        return float(
            f1_score(
                np.asarray(y_true == positive), np.asarray(y_pred == positive), zero_division=0.0
            )
        )
    return float(f1_score(y_true, y_pred, average="macro", zero_division=0.0))


def _integer_labels(labels: np.ndarray) -> bool:
    return isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.dtype.kind in "biu"


def _roc_auc(y_true: np.ndarray, classes: tuple[Any, ...], scores: np.ndarray) -> float:
    # sklearn (over a second to import) stays lazy: the API and the CLI import METRICS.
    from sklearn.metrics import roc_auc_score

    if len(classes) == 2:
        return float(roc_auc_score(np.asarray(y_true == classes[1]), scores[:, 1]))
    return float(
        roc_auc_score(y_true, scores, multi_class="ovr", average="macro", labels=list(classes))
    )


def _regression_score(metric_name: str, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    # sklearn (over a second to import) stays lazy: the API and the CLI import METRICS.
    from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

    y_pred = y_pred.astype("float64")
    if metric_name == "rmse":
        return float(root_mean_squared_error(y_true, y_pred))
    if metric_name == "mae":
        return float(mean_absolute_error(y_true, y_pred))
    return float(r2_score(y_true, y_pred))
