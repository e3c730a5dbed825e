"""Benchmark metrics, model scoring, and the with/without comparison that measures a contribution.

A contribution is measured by training the model's estimator twice on the same benchmark: once
on the base training rows alone ("without") and once on the base rows plus the contribution
("with"). Both runs use fixed seeds, so the same inputs always give the same scores.

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

Trivial baselines, used instead of fitting an estimator when there is nothing to fit:

- no training rows with a target: the best constant predictor for the benchmark, that is its
  most frequent class (ties: the smallest label) or its mean target. A contribution is then
  rewarded only for what its features teach the model, never for merely revealing the label
  distribution, and the baseline is never an arbitrarily bad constant that would inflate the
  improvement;
- training rows but a single class (classification), or no input column with any training
  value: the training rows' most frequent class (ties: the smallest label) or mean target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.models.estimators import (
    TaskType,
    build_estimator,
    validate_estimator,
    validate_task_type,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

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
    import numpy as np

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


class BenchmarkScorer:
    """A benchmark prepared once, to score the model trained on many training frames.

    Features are `input_columns`; when it is empty or None, every benchmark column other than
    the target that a training frame also has. Rows without a target value are dropped from
    both frames. An input column missing from a training frame, or empty there, carries no
    information and is left out. See the module docstring for the trivial baselines.
    """

    def __init__(
        self,
        benchmark_df: pd.DataFrame,
        *,
        task_type: str,
        estimator: str,
        target_column: str,
        input_columns: Sequence[str] | None = None,
        metric_name: str,
    ) -> None:
        metric = METRICS.get(metric_name)
        if metric is None:
            raise InvalidInput(
                f"unknown metric_name {metric_name!r}; expected one of {', '.join(METRICS)}"
            )
        validate_estimator(estimator, task_type)
        if metric.task_type != task_type:
            raise InvalidInput(
                f"metric {metric_name!r} is a {metric.task_type} metric; the model is {task_type}"
            )
        if target_column not in benchmark_df.columns:
            raise Unprocessable(f"target column {target_column!r} is missing from the benchmark")
        bench = _labelled(benchmark_df, target_column, task_type, "benchmark")
        if bench.empty:
            raise Unprocessable(f"the benchmark has no rows with a {target_column!r} value")
        self.metric = metric
        self.task_type = task_type
        self.estimator = estimator
        self.target_column = target_column
        self.input_columns = list(input_columns or [])
        self.bench = bench
        self.y_true = bench[target_column].to_numpy()
        self.classes: tuple[Any, ...] = (
            tuple(_sorted_labels(set(self.y_true))) if task_type == "classification" else ()
        )
        if metric.uses_probabilities and len(self.classes) < 2:
            raise Unprocessable("roc_auc needs at least two classes in the benchmark target")

    @property
    def floor(self) -> float:
        return improvement_floor(self.metric.name, self.y_true)

    def labelled(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A training frame's rows with a target (raises Unprocessable for unusable targets)."""
        return _labelled(frame, self.target_column, self.task_type, "training data")

    def predict(self, train_df: pd.DataFrame) -> Predictions:
        """Train the estimator on `train_df` and predict every benchmark row."""
        train = self.labelled(train_df)
        columns = _input_columns(train, self.bench, self.target_column, self.input_columns)
        predictor = _fit(
            train, self.bench, columns, self.task_type, self.estimator, self.target_column
        )
        x_bench = self.bench[columns]
        name = self.metric.name
        if self.task_type == "regression":
            values = predictor.predict(x_bench).astype("float64")
            return Predictions(name, self.y_true, values)
        if self.metric.uses_probabilities:
            scores = _class_scores(
                self.classes, predictor.classes_, predictor.predict_proba(x_bench)
            )
            return Predictions(name, self.y_true, scores, self.classes)
        return Predictions(name, self.y_true, predictor.predict(x_bench), self.classes)

    def score(self, train_df: pd.DataFrame) -> float:
        return metric_score(self.predict(train_df))


def score_model(
    train_df: pd.DataFrame,
    benchmark_df: pd.DataFrame,
    *,
    task_type: str,
    estimator: str,
    target_column: str,
    input_columns: Sequence[str] | None = None,
    metric_name: str,
) -> float:
    """Train `estimator` on `train_df` and return its `metric_name` score on `benchmark_df`.

    Features and trivial baselines as `BenchmarkScorer` describes.
    """
    scorer = BenchmarkScorer(
        benchmark_df,
        task_type=task_type,
        estimator=estimator,
        target_column=target_column,
        input_columns=input_columns,
        metric_name=metric_name,
    )
    return scorer.score(train_df)


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


def metric_samples(predictions: Predictions, weights: np.ndarray) -> np.ndarray:
    """The metric under each row of `weights` (resamples x benchmark rows, e.g. bootstrap
    counts), vectorised: one value per resample.

    With a row of ones it equals `metric_score`. Classes for f1 are those of the whole
    benchmark and predictions; a class absent from a resample is left out of its macro mean,
    as scikit-learn would. A resample without both classes has no roc_auc (NaN).
    """
    import numpy as np

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


def _weighted_f1(
    w: np.ndarray, y_true: np.ndarray, y_pred: np.ndarray, classes: tuple[Any, ...]
) -> np.ndarray:
    import numpy as np

    if len(classes) == 2:
        labels: list[Any] = [classes[-1]]
    else:
        labels = _sorted_labels(set(y_true) | set(y_pred))
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
    import numpy as np

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


def evaluate_contribution(
    base_train_df: pd.DataFrame | None,
    contribution_df: pd.DataFrame,
    benchmark_df: pd.DataFrame,
    *,
    task_type: str,
    estimator: str,
    target_column: str,
    input_columns: Sequence[str] | None = None,
    metric_name: str,
    metric_direction: str,
) -> EvaluationResult:
    """Score the model without and with the contribution's rows, and the improvement between.

    "without" trains on `base_train_df` alone (the trivial baseline when it has no rows);
    "with" trains on the base rows followed by the contribution's rows. The improvement is
    measured against the metric's floor (`improvement_floor`).
    """
    import pandas as pd

    validate_metric(metric_name, metric_direction, task_type)
    scorer = BenchmarkScorer(
        benchmark_df,
        task_type=task_type,
        estimator=estimator,
        target_column=target_column,
        input_columns=input_columns,
        metric_name=metric_name,
    )
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


def _labelled(frame: pd.DataFrame, target_column: str, task_type: str, what: str) -> pd.DataFrame:
    """Rows with a target value; regression targets as float64."""
    import pandas as pd

    if target_column not in frame.columns:
        if len(frame):
            raise Unprocessable(f"target column {target_column!r} is missing from the {what}")
        return pd.DataFrame(columns=[target_column])
    rows = frame[frame[target_column].notna()]
    if task_type == "regression":
        target = pd.to_numeric(rows[target_column], errors="coerce")
        if target.isna().any():
            raise Unprocessable(
                f"target column {target_column!r} has non-numeric values in the {what}"
            )
        rows = rows.assign(**{target_column: target.astype("float64")})
    return rows


def _input_columns(
    train: pd.DataFrame,
    bench: pd.DataFrame,
    target_column: str,
    input_columns: Sequence[str] | None,
) -> list[str]:
    if input_columns:
        columns = list(dict.fromkeys(input_columns))
        if target_column in columns:
            raise Unprocessable(f"target column {target_column!r} is also an input column")
        missing = [c for c in columns if c not in bench.columns]
        if missing:
            raise Unprocessable(
                f"input column(s) missing from the benchmark: {', '.join(map(repr, missing))}"
            )
    else:
        columns = [c for c in bench.columns if c != target_column]
    return [c for c in columns if c in train.columns and train[c].notna().any()]


class _Constant:
    """A fitted-predictor stand-in that always answers one value (the trivial baseline)."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.classes_ = [value]

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        import numpy as np

        return np.full(len(frame), self.value)

    def predict_proba(self, frame: pd.DataFrame) -> np.ndarray:
        import numpy as np

        return np.ones((len(frame), 1))


def _fit(
    train: pd.DataFrame,
    bench: pd.DataFrame,
    columns: list[str],
    task_type: str,
    estimator: str,
    target_column: str,
) -> Any:
    if train.empty:
        return _Constant(_best_constant(bench[target_column], task_type))
    y = train[target_column]
    single_class = task_type == "classification" and y.nunique() < 2
    if single_class or not columns:
        return _Constant(_best_constant(y, task_type))
    pipeline = build_estimator(estimator, task_type)
    try:
        pipeline.fit(train[columns], y.to_numpy())
    except ValueError as exc:
        # Typically a classification target holding continuous numbers.
        raise Unprocessable(
            f"the {estimator} estimator cannot be trained on this training data"
        ) from exc
    return pipeline


def _best_constant(target: pd.Series, task_type: str) -> Any:
    if task_type == "regression":
        return float(target.mean())
    counts = target.value_counts()
    tied = counts[counts == counts.max()].index
    return _sorted_labels(tied)[0]


def _sorted_labels(labels: Any) -> list[Any]:
    try:
        return sorted(labels)
    except TypeError:
        raise Unprocessable("target labels mix types that cannot be ordered") from None


def _label_score(metric_name: str, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    import numpy as np
    from sklearn.metrics import accuracy_score, f1_score

    if metric_name == "accuracy":
        return float(accuracy_score(y_true, y_pred))
    classes = _sorted_labels(set(y_true))
    if len(classes) == 2:
        positive = classes[-1]
        return float(
            f1_score(
                np.asarray(y_true == positive), np.asarray(y_pred == positive), zero_division=0.0
            )
        )
    return float(f1_score(y_true, y_pred, average="macro", zero_division=0.0))


def _class_scores(classes: tuple[Any, ...], model_classes: Any, proba: np.ndarray) -> np.ndarray:
    """One score column per benchmark class; a class the model never saw scores 0.

    With three or more classes, mass on classes the benchmark lacks is dropped and each row
    renormalised (uniform when nothing is left).
    """
    import numpy as np

    index = {label: i for i, label in enumerate(list(model_classes))}
    scores = np.column_stack(
        [proba[:, index[c]] if c in index else np.zeros(len(proba)) for c in classes]
    )
    if len(classes) == 2:
        return scores
    totals = scores.sum(axis=1, keepdims=True)
    return np.where(totals > 0, scores / np.where(totals > 0, totals, 1.0), 1.0 / len(classes))


def _roc_auc(y_true: np.ndarray, classes: tuple[Any, ...], scores: np.ndarray) -> float:
    import numpy as np
    from sklearn.metrics import roc_auc_score

    if len(classes) == 2:
        return float(roc_auc_score(np.asarray(y_true == classes[1]), scores[:, 1]))
    return float(
        roc_auc_score(y_true, scores, multi_class="ovr", average="macro", labels=list(classes))
    )


def _regression_score(metric_name: str, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

    y_pred = y_pred.astype("float64")
    if metric_name == "rmse":
        return float(root_mean_squared_error(y_true, y_pred))
    if metric_name == "mae":
        return float(mean_absolute_error(y_true, y_pred))
    return float(r2_score(y_true, y_pred))
