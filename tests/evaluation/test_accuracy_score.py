"""A model's accuracy on the benchmark is scikit-learn's to the last bit, whichever way it is
computed, and labels it would refuse are still refused."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score

from pipeline.core.errors import Unprocessable
from pipeline.evaluation.metrics import Predictions, metric_score


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("rows", [1, 7, 10_001])
def test_accuracy_of_integer_or_boolean_labels_is_scikit_learns(dtype: type, rows: int) -> None:
    rng = np.random.default_rng(rows)
    y_true: np.ndarray = rng.integers(0, 2 if dtype is np.bool_ else 3, rows).astype(dtype)
    y_pred: np.ndarray = rng.integers(0, 2 if dtype is np.bool_ else 3, rows).astype(dtype)
    predictions = Predictions("accuracy", y_true, y_pred, tuple(np.unique(y_true).tolist()))
    assert metric_score(predictions) == float(accuracy_score(y_true, y_pred))


def test_labels_scikit_learn_cannot_compare_are_still_refused() -> None:
    y_true = np.array([0.5, 1.5, 2.5])  # continuous: not class labels
    with pytest.raises(Unprocessable):
        metric_score(Predictions("accuracy", y_true, np.array([0, 1, 2]), (0.5, 1.5, 2.5)))
    with pytest.raises(Unprocessable):
        metric_score(Predictions("accuracy", np.array([], int), np.array([], int), ()))
