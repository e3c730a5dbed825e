"""The benchmark scorer: a benchmark prepared once, to train the model's estimator on many
training frames and score each on it.

Trivial baselines, used instead of fitting an estimator when there is nothing to fit:

- no training rows with a target: the best constant predictor for the benchmark, that is its
  most frequent class (ties: the smallest label) or its mean target. A contribution is then
  rewarded only for what its features teach the model, never for merely revealing the label
  distribution, and the baseline is never an arbitrarily bad constant that would inflate the
  improvement;
- training rows but a single class (classification), or no input column with any training
  value: the training rows' most frequent class (ties: the smallest label) or mean target.

A model with the owner's training code (`trainer`) is fitted in the sandbox instead of by a
listed estimator (`pipeline.sandbox`); the trivial baselines above stand in for it too, so
the owner's code is only ever given rows it can learn from.

Training rows are put in a canonical order (a hash of their content) before any fit, the
estimator's or the owner's: the order in which rows were stored changes nothing.

A model with `paired_fits` K > 1 (`pipeline.models.paired_fits`) is fitted K times per
training frame, fit k on the rows whose keyed draw for k keeps them; each fit follows the
rules above on its own rows (an empty or one-class subsample gets its trivial baseline).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, Unpack

import numpy as np
import pandas as pd

from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.evaluation.metrics import (
    METRICS,
    Predictions,
    improvement_floor,
    metric_score,
    sorted_labels,
    stack_copies,
)
from pipeline.models.estimators import (
    CATALOG,
    Recipe,
    as_recipe,
    build_estimator,
    validate_estimator,
)
from pipeline.models.paired_fits import DEFAULT_PAIRED_FITS, paired_mask, validate_paired_fits
from pipeline.models.row_keys import canonical_order, row_keys

if TYPE_CHECKING:
    from pipeline.sandbox.runner import OwnerTrainer


class ScoringOptions(TypedDict):
    """How a model is trained and scored on a benchmark (keyword arguments of the scorer)."""

    task_type: str
    # A recipe, or an estimator's name (its recipe without parameters); None with `trainer`:
    # the owner's code, run in the sandbox.
    estimator: str | Recipe | None
    trainer: NotRequired[OwnerTrainer | None]
    target_column: str
    # Empty or None: every benchmark column other than the target that the training frame has.
    input_columns: NotRequired[Sequence[str] | None]
    metric_name: str
    # How many fits on keyed subsamples each training frame gets (the model's `paired_fits`,
    # `pipeline.rewards.stability`); 1, the default, is one fit on every row.
    paired_fits: NotRequired[int]


class BenchmarkScorer:
    """A benchmark prepared once, to score the model trained on many training frames.

    Features are `input_columns`; when it is empty or None, every benchmark column other than
    the target that a training frame also has. Rows without a target value are dropped from
    both frames. An input column missing from a training frame, or empty there, carries no
    information and is left out. See the module docstring for the trivial baselines.
    """

    def __init__(self, benchmark_df: pd.DataFrame, **options: Unpack[ScoringOptions]) -> None:
        task_type, estimator = options["task_type"], options["estimator"]
        recipe = None if estimator is None else as_recipe(estimator)
        target_column, metric_name = options["target_column"], options["metric_name"]
        metric = METRICS.get(metric_name)
        if metric is None:
            raise InvalidInput(
                f"unknown metric_name {metric_name!r}; expected one of {', '.join(METRICS)}"
            )
        trainer = options.get("trainer")
        if trainer is None:
            validate_estimator(recipe.estimator if recipe else "", task_type)
        if metric.task_type != task_type:
            raise InvalidInput(
                f"metric {metric_name!r} is a {metric.task_type} metric; the model is {task_type}"
            )
        if target_column not in benchmark_df.columns:
            raise Unprocessable(f"target column {target_column!r} is missing from the benchmark")
        # A copy: the scorer keeps the benchmark for its lifetime, whatever the caller does.
        bench = _labelled(benchmark_df, target_column, task_type, "benchmark").copy()
        if bench.empty:
            raise Unprocessable(f"the benchmark has no rows with a {target_column!r} value")
        self.metric = metric
        self.task_type = task_type
        self.recipe = recipe
        self.trainer = trainer
        self.target_column = target_column
        self.input_columns = list(options.get("input_columns") or [])
        fits = options.get("paired_fits")
        self.paired_fits = validate_paired_fits(DEFAULT_PAIRED_FITS if fits is None else fits)
        self.bench = bench
        self.y_true = bench[target_column].to_numpy()
        self.classes: tuple[Any, ...] = (
            tuple(sorted_labels(set(self.y_true))) if task_type == "classification" else ()
        )
        if metric.uses_probabilities and len(self.classes) < 2:
            raise Unprocessable("roc_auc needs at least two classes in the benchmark target")

    @property
    def floor(self) -> float:
        return improvement_floor(self.metric.name, self.y_true)

    def labelled(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A training frame's rows with a target (raises Unprocessable for unusable targets)."""
        return _labelled(frame, self.target_column, self.task_type, "training data")

    def feature_columns(self, train: pd.DataFrame) -> list[str]:
        """The input columns a model trained on the labelled frame `train` uses."""
        return _input_columns(train, self.bench, self.target_column, self.input_columns)

    def predict(self, train_df: pd.DataFrame) -> Predictions:
        """Train the estimator (or the owner's trainer) on `train_df` and predict every
        benchmark row.

        With `paired_fits` K > 1: K fits, fit k on the labelled rows `paired_mask` keeps for k
        (`pipeline.models.paired_fits`), each as `predict` would fit those rows alone (the
        trivial baselines included); their predictions stacked fit by fit (`copies` K)."""
        train = self.labelled(train_df)
        if self.paired_fits == 1:
            return self._predict_rows(train)
        columns = self.feature_columns(train)
        used = [*columns, self.target_column]
        # The rows' keys once: they pick each fit's rows and order them for the fit.
        keys = row_keys(train, used) if len(train) else np.zeros(0, dtype=np.uint64)
        fits = []
        for fit in range(self.paired_fits):
            kept = np.flatnonzero(paired_mask(keys, fit, self.paired_fits))
            fits.append(self._predict_rows(train.iloc[kept], (used, keys[kept]), fit))
        return stack_copies(fits)

    def predict_fit(self, train_df: pd.DataFrame, fit: int) -> Predictions:
        """One fit on every labelled row of `train_df` under paired fit `fit`'s own seed
        (`pipeline.models.paired_fits.fit_seed`): a fit of the expected game, whose subsample
        the caller draws (`bench/_references.py`)."""
        return self._predict_rows(self.labelled(train_df), fit=fit)

    def _predict_rows(
        self,
        train: pd.DataFrame,
        keyed: tuple[list[str], np.ndarray] | None = None,
        fit: int | None = None,
    ) -> Predictions:
        """One fit on the labelled rows `train`. `keyed`: their `row_keys` over the columns
        named, reused when the fit uses those columns; `fit`: the paired fit it is (its seed)."""
        columns = self.feature_columns(train)
        used = [*columns, self.target_column]
        keys = keyed[1] if keyed is not None and keyed[0] == used else None
        predictor: Any = _baseline(train, self.bench, columns, self.task_type, self.target_column)
        if predictor is None:
            if self.recipe is None:
                return self._owner_predictions(train, columns, keys)
            predictor = _fit(
                train, columns, self.task_type, self.recipe, self.target_column, keys, fit
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

    def _owner_predictions(
        self, train: pd.DataFrame, columns: list[str], keys: np.ndarray | None = None
    ) -> Predictions:
        """The owner's code fits and predicts in the sandbox; it is given the training rows and
        the benchmark's features, never the benchmark's labels. Scored here, on them."""
        assert self.trainer is not None
        used = [*columns, self.target_column]
        rows = train[used]
        ordered = (
            canonical_order(rows) if keys is None else rows.iloc[np.argsort(keys, kind="stable")]
        )
        output = self.trainer.predict(
            ordered.reset_index(drop=True),
            self.bench[columns].reset_index(drop=True),
            target=self.target_column,
            task_type=self.task_type,
            probabilities=self.metric.uses_probabilities,
            y_true=self.y_true,
        )
        name = self.metric.name
        if self.task_type == "regression":
            return Predictions(name, self.y_true, output.values)
        if self.metric.uses_probabilities:
            scores = _class_scores(self.classes, output.classes, output.values)
            return Predictions(name, self.y_true, scores, self.classes)
        return Predictions(name, self.y_true, output.values, self.classes)

    def score(self, train_df: pd.DataFrame) -> float:
        return metric_score(self.predict(train_df))


def score_model(
    train_df: pd.DataFrame, benchmark_df: pd.DataFrame, **options: Unpack[ScoringOptions]
) -> float:
    """Train the estimator on `train_df` and return its metric's score on `benchmark_df`.

    Features and trivial baselines as `BenchmarkScorer` describes.
    """
    return BenchmarkScorer(benchmark_df, **options).score(train_df)


def _labelled(frame: pd.DataFrame, target_column: str, task_type: str, what: str) -> pd.DataFrame:
    """Rows with a target value; regression targets as float64."""
    if target_column not in frame.columns:
        if len(frame):
            raise Unprocessable(f"target column {target_column!r} is missing from the {what}")
        return pd.DataFrame(columns=[target_column])
    target = frame[target_column]
    dtype = getattr(target, "dtype", None)  # none: a duplicated column name, a frame
    if isinstance(dtype, np.dtype) and dtype.kind in "iub":
        rows = frame  # NumPy integers and booleans hold no missing value: nothing to check
    else:
        known = target.notna()
        # Every row labelled (the usual case): the frame itself, not a copy of every column.
        rows = frame if bool(known.all()) else frame[known]
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
        return np.full(len(frame), self.value)

    def predict_proba(self, frame: pd.DataFrame) -> np.ndarray:
        return np.ones((len(frame), 1))


def _baseline(
    train: pd.DataFrame,
    bench: pd.DataFrame,
    columns: list[str],
    task_type: str,
    target_column: str,
) -> _Constant | None:
    """The trivial baseline when there is nothing to fit (module docstring), else None."""
    if train.empty:
        return _Constant(_best_constant(bench[target_column], task_type))
    y = train[target_column]
    single_class = task_type == "classification" and y.nunique() < 2
    if single_class or not columns:
        return _Constant(_best_constant(y, task_type))
    return None


def _fit(
    train: pd.DataFrame,
    columns: list[str],
    task_type: str,
    recipe: Recipe,
    target_column: str,
    keys: np.ndarray | None = None,
    fit: int | None = None,
) -> Any:
    """The recipe's pipeline fitted on `train`, its rows in their canonical order and, for a
    keyed estimator, with their keys (`pipeline.models.row_keys`; `keys` when known); `fit`:
    the paired fit it is, which draws its own seed (`pipeline.models.paired_fits.fit_seed`)."""
    used = [*columns, target_column]
    keys = row_keys(train, used) if keys is None else keys
    order = np.argsort(keys, kind="stable")
    train, keys = train.iloc[order], keys[order]
    y = train[target_column]
    pipeline = build_estimator(recipe, task_type, rows=len(train), fit=fit)
    params = {"model__row_keys": keys} if CATALOG[recipe.estimator].keyed else {}
    try:
        pipeline.fit(train[columns], y.to_numpy(), **params)
    except (ValueError, TypeError) as exc:
        # Typically a classification target holding continuous numbers, or labels of mixed
        # types (0 and "0") that cannot be sorted.
        raise Unprocessable(
            f"the {recipe.estimator} estimator cannot be trained on this training data"
        ) from exc
    return pipeline


def _best_constant(target: pd.Series, task_type: str) -> Any:
    if task_type == "regression":
        return float(target.mean())
    counts = target.value_counts()
    tied = counts[counts == counts.max()].index
    return sorted_labels(tied)[0]


def _class_scores(classes: tuple[Any, ...], model_classes: Any, proba: np.ndarray) -> np.ndarray:
    """One score column per benchmark class; a class the model never saw scores 0.

    With three or more classes, mass on classes the benchmark lacks is dropped and each row
    renormalised (uniform when nothing is left).
    """
    index = {label: i for i, label in enumerate(list(model_classes))}
    scores = np.column_stack(
        [proba[:, index[c]] if c in index else np.zeros(len(proba)) for c in classes]
    )
    if len(classes) == 2:
        return scores
    totals = scores.sum(axis=1, keepdims=True)
    return np.where(totals > 0, scores / np.where(totals > 0, totals, 1.0), 1.0 / len(classes))
