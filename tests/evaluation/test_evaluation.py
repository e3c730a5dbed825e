"""Metrics, scoring and the with/without comparison behind rewards (spec §1)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification, make_regression
from sklearn.metrics import f1_score

from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.evaluation.comparison import evaluate_contribution
from pipeline.evaluation.metrics import METRICS, improvement_pct, validate_metric
from pipeline.evaluation.scorer import score_model
from pipeline.models.estimators import build_estimator


def _classification(n: int = 700, n_classes: int = 2, seed: int = 3) -> pd.DataFrame:
    x, y = make_classification(
        n_samples=n,
        n_features=6,
        n_informative=4,
        n_redundant=0,
        n_classes=n_classes,
        random_state=seed,
    )
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(6)])
    frame["target"] = y
    return frame


def _regression(n: int = 700, seed: int = 3) -> pd.DataFrame:
    x, y = make_regression(n_samples=n, n_features=5, n_informative=3, noise=10, random_state=seed)
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(5)])
    frame["target"] = y
    return frame


CLASSIFICATION = _classification()
REGRESSION = _regression()
# Disjoint slices: a small base set, a larger contribution, a held-out benchmark.
BASE, CONTRIBUTION, BENCHMARK = slice(0, 30), slice(30, 330), slice(400, 700)


def _evaluate(
    frame: pd.DataFrame, contribution: pd.DataFrame, metric: str, **overrides: Any
) -> Any:
    metric_info = METRICS[metric]
    options: dict[str, Any] = {
        "task_type": metric_info.task_type,
        "estimator": (
            "logistic_regression" if metric_info.task_type == "classification" else "ridge"
        ),
        "target_column": "target",
        "metric_name": metric,
        "metric_direction": metric_info.direction,
    }
    options.update(overrides)
    return evaluate_contribution(frame[BASE], contribution, frame[BENCHMARK], **options)


def _score(train: pd.DataFrame, bench: pd.DataFrame, metric: str, **overrides: Any) -> float:
    task = METRICS[metric].task_type
    options: dict[str, Any] = {
        "task_type": task,
        "estimator": "logistic_regression" if task == "classification" else "ridge",
        "target_column": "target",
        "metric_name": metric,
    }
    options.update(overrides)
    return score_model(train, bench, **options)


# --- metric catalogue ----------------------------------------------------------------------


def test_metrics_have_task_type_and_natural_direction() -> None:
    assert {name: (m.task_type, m.direction) for name, m in METRICS.items()} == {
        "accuracy": ("classification", "higher_is_better"),
        "f1": ("classification", "higher_is_better"),
        "roc_auc": ("classification", "higher_is_better"),
        "rmse": ("regression", "lower_is_better"),
        "mae": ("regression", "lower_is_better"),
        "r2": ("regression", "higher_is_better"),
    }


def test_unknown_metric_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="unknown metric_name 'precision'"):
        validate_metric("precision", "higher_is_better")


def test_unknown_direction_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="unknown metric_direction 'up'"):
        validate_metric("accuracy", "up")


def test_direction_contradicting_the_metric_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="'rmse' is lower_is_better"):
        validate_metric("rmse", "higher_is_better")


def test_metric_for_the_other_task_type_is_invalid_input() -> None:
    assert validate_metric("r2", "higher_is_better", "regression").name == "r2"
    with pytest.raises(InvalidInput, match="'accuracy' is a classification metric"):
        validate_metric("accuracy", "higher_is_better", "regression")


# --- every metric --------------------------------------------------------------------------


def test_classification_metrics_on_a_known_prediction() -> None:
    # A one-feature threshold model the estimator learns perfectly apart from one overlap.
    train = pd.DataFrame(
        {"x": [0.0, 1, 2, 3, 10, 11, 12, 13] * 5, "target": [0, 0, 0, 0, 1, 1, 1, 1] * 5}
    )
    bench = pd.DataFrame({"x": [0.0, 1, 12, 13], "target": [0, 0, 1, 1]})
    assert _score(train, bench, "accuracy") == 1.0
    assert _score(train, bench, "f1") == 1.0
    assert _score(train, bench, "roc_auc") == 1.0


def test_binary_f1_scores_the_larger_label_as_positive() -> None:
    train = pd.DataFrame({"x": [0.0, 1, 10, 11] * 10, "target": ["no", "no", "yes", "yes"] * 10})
    # Predictions follow x: one "yes" is missed, so recall of "yes" is 1/2, precision 1.
    bench = pd.DataFrame({"x": [0.0, 1, 11, 0.5], "target": ["no", "no", "yes", "yes"]})
    assert _score(train, bench, "f1") == pytest.approx(2 / 3)
    assert _score(train, bench, "accuracy") == pytest.approx(0.75)


def test_multiclass_f1_and_roc_auc_are_macro_averages() -> None:
    frame = _classification(n=600, n_classes=3, seed=5)
    train, bench = frame.iloc[:400], frame.iloc[400:]
    f1 = _score(train, bench, "f1")
    auc = _score(train, bench, "roc_auc")
    assert 0.5 < f1 < 1.0
    assert 0.5 < auc < 1.0

    features = [c for c in frame.columns if c != "target"]
    model = build_estimator("logistic_regression", "classification")
    predicted = model.fit(train[features], train["target"].to_numpy()).predict(bench[features])
    assert f1 == pytest.approx(f1_score(bench["target"], predicted, average="macro"))


def test_regression_metrics_on_a_known_prediction() -> None:
    # y = 2x exactly: linear regression recovers it, so errors are 0 and r2 is 1.
    train = pd.DataFrame({"x": np.arange(20.0), "target": 2 * np.arange(20.0)})
    bench = pd.DataFrame({"x": [0.5, 3.5, 7.0], "target": [1.0, 7.0, 14.0]})
    kwargs = {"estimator": "linear_regression"}
    assert _score(train, bench, "rmse", **kwargs) == pytest.approx(0.0, abs=1e-9)
    assert _score(train, bench, "mae", **kwargs) == pytest.approx(0.0, abs=1e-9)
    assert _score(train, bench, "r2", **kwargs) == pytest.approx(1.0)


def test_metric_for_the_other_task_type_is_refused_by_score_model() -> None:
    with pytest.raises(InvalidInput, match="is a regression metric"):
        _score(
            CLASSIFICATION[BASE],
            CLASSIFICATION[BENCHMARK],
            "rmse",
            task_type="classification",
            estimator="logistic_regression",
        )


# --- with and without a contribution -------------------------------------------------------


@pytest.mark.parametrize("metric", list(METRICS))
def test_informative_rows_improve_every_metric(metric: str) -> None:
    frame = CLASSIFICATION if METRICS[metric].task_type == "classification" else REGRESSION
    result = _evaluate(frame, frame[CONTRIBUTION], metric)
    assert result.improvement_pct > 0
    assert result.train_rows_without == 30
    assert result.train_rows_with == 330
    assert result.metric_name == metric
    assert result.direction == METRICS[metric].direction


@pytest.mark.parametrize("metric", list(METRICS))
def test_label_noise_rows_do_not_improve(metric: str) -> None:
    frame = CLASSIFICATION if METRICS[metric].task_type == "classification" else REGRESSION
    noisy = frame[CONTRIBUTION].copy()
    rng = np.random.default_rng(0)
    noisy["target"] = rng.permutation(noisy["target"].to_numpy())
    result = _evaluate(frame, noisy, metric)
    assert result.improvement_pct <= 0


# Tree ensembles are slower to fit: a smaller contribution and benchmark keep the tests fast.
SMALL_CONTRIBUTION, SMALL_BENCHMARK = slice(30, 180), slice(500, 700)


def _evaluate_small(contribution: pd.DataFrame, metric: str, estimator: str) -> Any:
    return evaluate_contribution(
        CLASSIFICATION[BASE],
        contribution,
        CLASSIFICATION[SMALL_BENCHMARK],
        task_type="classification",
        estimator=estimator,
        target_column="target",
        metric_name=metric,
        metric_direction="higher_is_better",
    )


@pytest.mark.parametrize("estimator", ["random_forest_classifier", "gradient_boosting_classifier"])
def test_tree_classifiers_reward_informative_rows_and_not_flipped_labels(estimator: str) -> None:
    contribution = CLASSIFICATION[SMALL_CONTRIBUTION]
    flipped = contribution.assign(target=1 - contribution["target"])
    assert _evaluate_small(contribution, "accuracy", estimator).improvement_pct > 0
    assert _evaluate_small(flipped, "accuracy", estimator).improvement_pct < 0


def test_same_inputs_give_the_same_numbers() -> None:
    contribution = CLASSIFICATION[SMALL_CONTRIBUTION]
    first = _evaluate_small(contribution, "roc_auc", "random_forest_classifier")
    second = _evaluate_small(contribution.copy(), "roc_auc", "random_forest_classifier")
    assert first == second


def test_contribution_without_targets_changes_nothing() -> None:
    unlabelled = CLASSIFICATION[CONTRIBUTION].assign(target=np.nan)
    result = _evaluate(CLASSIFICATION, unlabelled, "accuracy")
    assert result.score_with == result.score_without
    assert result.improvement_pct == 0.0
    assert result.train_rows_with == result.train_rows_without == 30


def test_evaluation_refuses_an_unknown_metric_before_training() -> None:
    with pytest.raises(InvalidInput, match="unknown metric_name"):
        _evaluate(CLASSIFICATION, CLASSIFICATION[CONTRIBUTION], "accuracy", metric_name="auc")


# --- trivial baselines ---------------------------------------------------------------------


def test_no_training_rows_classification_uses_the_benchmark_majority_class() -> None:
    bench = pd.DataFrame({"x": range(10), "target": [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]})
    empty = pd.DataFrame()
    assert _score(empty, bench, "accuracy") == pytest.approx(0.7)
    assert _score(empty, bench, "roc_auc") == 0.5
    # The majority class is 0, the negative one: no positive is ever predicted.
    assert _score(empty, bench, "f1") == 0.0


def test_majority_ties_pick_the_smallest_label() -> None:
    bench = pd.DataFrame({"x": range(4), "target": ["b", "a", "b", "a"]})
    assert _score(pd.DataFrame(), bench, "f1") == 0.0  # predicts "a"; positive is "b"


def test_no_training_rows_regression_predicts_the_benchmark_mean() -> None:
    bench = pd.DataFrame({"x": range(4), "target": [1.0, 2.0, 3.0, 6.0]})
    assert _score(pd.DataFrame(), bench, "r2") == 0.0
    assert _score(pd.DataFrame(), bench, "mae") == pytest.approx(1.5)
    assert _score(pd.DataFrame(), bench, "rmse") == pytest.approx(math.sqrt(3.5))


def test_single_training_class_predicts_that_class() -> None:
    train = pd.DataFrame({"x": [1.0, 2.0, 3.0], "target": [1, 1, 1]})
    bench = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "target": [0, 1, 0, 0]})
    assert _score(train, bench, "accuracy") == 0.25
    assert _score(train, bench, "roc_auc") == 0.5


def test_training_rows_without_usable_inputs_predict_the_training_mean() -> None:
    train = pd.DataFrame({"x": [np.nan, np.nan], "target": [4.0, 6.0]})
    bench = pd.DataFrame({"x": [1.0, 2.0], "target": [5.0, 7.0]})
    assert _score(train, bench, "mae") == pytest.approx(1.0)


def test_empty_base_is_compared_with_the_trivial_baseline() -> None:
    result = evaluate_contribution(
        None,
        CLASSIFICATION[CONTRIBUTION],
        CLASSIFICATION[BENCHMARK],
        task_type="classification",
        estimator="logistic_regression",
        target_column="target",
        metric_name="roc_auc",
        metric_direction="higher_is_better",
    )
    assert result.score_without == 0.5
    assert result.train_rows_without == 0
    assert result.improvement_pct == pytest.approx((result.score_with - 0.5) / 0.5 * 100)


# --- columns and targets -------------------------------------------------------------------


def test_null_targets_are_dropped_from_both_frames() -> None:
    train = pd.DataFrame({"x": [0.0, 1, 10, 11, 5], "target": [0, 0, 1, 1, None]})
    bench = pd.DataFrame({"x": [0.0, 11, 3], "target": [0, 1, None]})
    assert _score(train, bench, "accuracy") == 1.0


def test_input_columns_restrict_the_features() -> None:
    # Only "signal" predicts the target; limited to "noise" the model cannot beat chance.
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"signal": rng.normal(size=400), "noise": rng.normal(size=400)})
    frame["target"] = (frame["signal"] > 0).astype(int)
    train, bench = frame.iloc[:300], frame.iloc[300:]
    assert _score(train, bench, "accuracy") > 0.95
    assert _score(train, bench, "accuracy", input_columns=["noise"]) < 0.7


def test_default_inputs_are_benchmark_columns_present_in_training() -> None:
    train = pd.DataFrame({"x": [0.0, 1, 10, 11] * 5, "target": [0, 0, 1, 1] * 5})
    bench = pd.DataFrame({"x": [0.0, 11], "extra": ["a", "b"], "target": [0, 1]})
    assert _score(train, bench, "accuracy", input_columns=[]) == 1.0


def test_input_column_missing_from_the_benchmark_is_unprocessable() -> None:
    with pytest.raises(Unprocessable, match="missing from the benchmark: 'x9'"):
        _score(CLASSIFICATION[BASE], CLASSIFICATION[BENCHMARK], "accuracy", input_columns=["x9"])


def test_missing_target_column_is_unprocessable() -> None:
    with pytest.raises(Unprocessable, match="missing from the benchmark"):
        _score(CLASSIFICATION[BASE], CLASSIFICATION[BENCHMARK], "accuracy", target_column="y")
    train = CLASSIFICATION[BASE].drop(columns="target")
    with pytest.raises(Unprocessable, match="missing from the training data"):
        _score(train, CLASSIFICATION[BENCHMARK], "accuracy")


def test_non_numeric_regression_target_is_unprocessable() -> None:
    bench = pd.DataFrame({"x": [1.0, 2.0], "target": ["high", "low"]})
    with pytest.raises(Unprocessable, match="non-numeric"):
        _score(pd.DataFrame(), bench, "r2")


def test_roc_auc_with_a_single_benchmark_class_is_unprocessable() -> None:
    bench = pd.DataFrame({"x": [1.0, 2.0], "target": [1, 1]})
    with pytest.raises(Unprocessable, match="at least two classes"):
        _score(CLASSIFICATION[BASE], bench, "roc_auc", input_columns=["x"])


# --- improvement ---------------------------------------------------------------------------


def test_improvement_is_relative_and_direction_aware() -> None:
    assert improvement_pct(0.9, 0.8, "higher_is_better") == pytest.approx(12.5)
    assert improvement_pct(0.7, 0.8, "higher_is_better") == pytest.approx(-12.5)
    assert improvement_pct(8.0, 10.0, "lower_is_better") == pytest.approx(20.0)
    assert improvement_pct(12.0, 10.0, "lower_is_better") == pytest.approx(-20.0)


def test_improvement_relative_to_a_negative_baseline_uses_its_magnitude() -> None:
    assert improvement_pct(0.1, -0.2, "higher_is_better") == pytest.approx(150.0)


def test_improvement_from_a_zero_baseline_is_the_difference_in_points() -> None:
    assert improvement_pct(0.25, 0.0, "higher_is_better") == pytest.approx(25.0)
    assert improvement_pct(0.25, 0.0, "lower_is_better") == pytest.approx(-25.0)


def test_improvement_with_an_unknown_direction_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        improvement_pct(1.0, 0.5, "sideways")


def test_roc_auc_scores_benchmark_classes_the_model_never_saw_as_zero() -> None:
    # Trained on classes 0 and 1 only; the benchmark also holds class 2.
    frame = _classification(n=600, n_classes=3, seed=5)
    train = frame.iloc[:400][frame.iloc[:400]["target"] < 2]
    auc = _score(train, frame.iloc[400:], "roc_auc")
    assert 0.5 <= auc < 1.0


def test_roc_auc_ignores_training_classes_the_benchmark_lacks() -> None:
    frame = _classification(n=600, n_classes=3, seed=5)
    bench = frame.iloc[400:][frame.iloc[400:]["target"] < 2]
    assert 0.5 < _score(frame.iloc[:400], bench, "roc_auc") <= 1.0
