"""Predictions from the sandbox are checked before they are scored (sandbox/predictions.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.outcome import TrainerOutput
from pipeline.sandbox.predictions import check_labels, check_probabilities, check_values

NUMBERS = np.array([0, 1, 1, 0])
TEXT = np.array(["no", "yes", "yes", "no"], dtype=object)


def fails(check: object, *args: object) -> TrainerFailed:
    with pytest.raises(TrainerFailed) as caught:
        check(*args)  # type: ignore[operator]
    return caught.value


def test_good_predictions_pass() -> None:
    assert list(check_labels(TrainerOutput(np.array([1, 0, 1, 0]), None), 4, NUMBERS)) == [
        1,
        0,
        1,
        0,
    ]
    assert check_labels(TrainerOutput(np.array(["no"] * 4), None), 4, TEXT).dtype.kind == "U"
    assert check_values(TrainerOutput(np.array([[1], [2], [3], [4]]), None), 4).dtype == np.float64
    proba = TrainerOutput(np.array([[0.2, 0.8]] * 4), np.array([0, 1]))
    values, classes = check_probabilities(proba, 4, NUMBERS)
    assert values.shape == (4, 2) and list(classes) == [0, 1]


def test_wrong_length_names_the_counts() -> None:
    failed = fails(check_labels, TrainerOutput(np.array([0, 1, 0]), None), 169, NUMBERS)
    assert failed.detail == "the training code returned 3 predictions for 169 benchmark rows"
    assert fails(check_values, TrainerOutput(np.array(5.0), None), 4).summary == (
        "predictions of the wrong length"
    )


@pytest.mark.parametrize(
    ("output", "summary"),
    [
        (TrainerOutput(np.array([[0, 1]] * 4), None), "predictions of the wrong type"),
        (TrainerOutput(np.array([0.0, np.nan, 1.0, 0.0]), None), "predicted labels with NaN"),
        (TrainerOutput(np.array(["a", "b", "a", "b"]), None), "predictions of the wrong type"),
        (TrainerOutput(np.array([1 + 2j] * 4), None), "predictions of the wrong type"),
    ],
    ids=["two-columns", "nan", "text-for-numbers", "complex"],
)
def test_bad_labels_fail(output: TrainerOutput, summary: str) -> None:
    assert fails(check_labels, output, 4, NUMBERS).summary.startswith(summary)


def test_numbers_for_text_labels_fail() -> None:
    failed = fails(check_labels, TrainerOutput(np.array([0, 1, 1, 0]), None), 4, TEXT)
    assert failed.detail == "predicted labels are numbers, the benchmark's labels are text"


def test_regression_values_must_be_finite_numbers() -> None:
    failed = fails(check_values, TrainerOutput(np.array([1.0, np.inf, 2.0, 3.0]), None), 4)
    assert failed.summary == "predicted values with NaN or infinite values"
    text = fails(check_values, TrainerOutput(np.array(["1", "2", "3", "4"]), None), 4)
    assert text.summary == "predictions of the wrong type"


@pytest.mark.parametrize(
    ("values", "classes", "detail"),
    [
        ([[0.2, 0.8]] * 4, None, "predict_proba needs the model's classes_"),
        ([[0.2, 0.8]] * 4, [0, 1, 2], "one column per class (3)"),
        ([[0.2, 0.8]] * 4, [1, 1], "repeat a class"),
        ([[1.5, -0.5]] * 4, [0, 1], "must lie in [0, 1]"),
        ([[np.nan, 1.0]] * 4, [0, 1], "NaN or infinite"),
        ([[0.2, 0.8]] * 4, ["0", "1"], "classes_ are text, the benchmark's labels are numbers"),
    ],
    ids=["no-classes", "columns", "repeated", "range", "nan", "kind"],
)
def test_bad_probabilities_fail(
    values: list[list[float]], classes: list[object] | None, detail: str
) -> None:
    output = TrainerOutput(np.array(values), None if classes is None else np.array(classes))
    assert detail in fails(check_probabilities, output, 4, NUMBERS).detail
