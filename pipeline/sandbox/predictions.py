"""Checks on a trainer's predictions before they are scored: length, type, missing values.

The service scores predictions on the benchmark's real labels, which never enter the
sandbox; these checks make sure what came back is one plain prediction per benchmark row
(labels of the benchmark's kind, finite numbers, or a probability matrix with one column
per class the model names), so that a faulty or hostile trainer fails with a clear reason
instead of a wrong score.
"""

from __future__ import annotations

import numpy as np

from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.outcome import TrainerOutput

# Kinds numpy gives plain labels: booleans, integers, floats, text.
LABEL_KINDS = "biufU"
NUMBER_KINDS = "biuf"
# Probabilities may miss [0, 1] by float rounding only.
PROBABILITY_SLACK = 1e-6


def _wrong(summary: str, detail: str) -> TrainerFailed:
    return TrainerFailed(summary, detail)


def _length(values: np.ndarray, rows: int) -> None:
    if values.ndim == 0 or values.shape[0] != rows:
        count = 1 if values.ndim == 0 else values.shape[0]
        raise _wrong(
            "predictions of the wrong length",
            f"the training code returned {count} predictions for {rows} benchmark rows",
        )


def _no_missing(values: np.ndarray, what: str) -> None:
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        bad = int((~np.isfinite(values)).sum())
        raise _wrong(f"{what} with NaN or infinite values", f"{bad} {what} are NaN or infinite")


def check_labels(output: TrainerOutput, rows: int, y_true: np.ndarray) -> np.ndarray:
    """Class labels, one per row, of the benchmark labels' kind (numbers or text)."""
    values = _one_per_row(output, rows, LABEL_KINDS, "predicted labels", "number or text")
    _same_kind(values, y_true, "predicted labels")
    return np.array(values)


def _same_kind(labels: np.ndarray, y_true: np.ndarray, what: str) -> None:
    """Labels are text exactly when the benchmark's are: 1 and "1" never match."""
    sample = np.asarray(y_true).ravel()[:100]
    text_labels = sample.dtype.kind in "OUS" and all(isinstance(v, str) for v in sample)
    if text_labels != (labels.dtype.kind == "U"):
        raise _wrong(
            "predictions of the wrong type",
            f"{what} are {'text' if labels.dtype.kind == 'U' else 'numbers'}, "
            f"the benchmark's labels are {'text' if text_labels else 'numbers'}",
        )


def check_values(output: TrainerOutput, rows: int) -> np.ndarray:
    """Regression values: one finite number per row."""
    values = _one_per_row(output, rows, NUMBER_KINDS, "predicted values", "number")
    return np.array(values, dtype="float64")


def _one_per_row(output: TrainerOutput, rows: int, kinds: str, what: str, each: str) -> np.ndarray:
    """The output as one value per row (a single column counts), of one of `kinds`, none
    missing."""
    values = output.values
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    _length(values, rows)
    if values.ndim != 1 or values.dtype.kind not in kinds:
        raise _wrong(
            "predictions of the wrong type",
            f"{what} must be one {each} per row, got {values.dtype} of shape {values.shape}",
        )
    _no_missing(values, what)
    return values


def check_probabilities(
    output: TrainerOutput, rows: int, y_true: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A (rows, classes) probability matrix and the model's classes, one column each."""
    values, classes = output.values, output.classes
    _length(values, rows)
    if classes is None or classes.ndim != 1 or classes.dtype.kind not in LABEL_KINDS:
        raise _wrong(
            "predictions of the wrong type",
            "predict_proba needs the model's classes_: one number or text per class",
        )
    if values.ndim != 2 or values.shape[1] != len(classes) or values.dtype.kind not in NUMBER_KINDS:
        raise _wrong(
            "predictions of the wrong type",
            f"predict_proba must return one column per class ({len(classes)}), got "
            f"{values.dtype} of shape {values.shape}",
        )
    if len(set(classes.tolist())) != len(classes):
        raise _wrong("predictions of the wrong type", "the model's classes_ repeat a class")
    _same_kind(classes, y_true, "the model's classes_")
    probabilities = np.array(values, dtype="float64")
    _no_missing(probabilities, "predicted probabilities")
    if probabilities.min() < -PROBABILITY_SLACK or probabilities.max() > 1 + PROBABILITY_SLACK:
        raise _wrong("predictions of the wrong type", "predicted probabilities must lie in [0, 1]")
    return probabilities, np.array(classes)
