"""Numeric columns cut into bins, one-hot: features on which a linear model bends like trees.

A tree ensemble's prediction is, to a first approximation, a sum of step functions of single
features. A linear model on each numeric column's bin indicators is such a sum, and it is
still fitted by the surrogate's d × d solves (`pipeline.rewards.surrogate_fits`).

Thresholds are found as HistGradientBoosting finds its own (`_find_binning_thresholds`): a
column with at most `bins` distinct values gets one bin per value (midpoints between them), a
column with more gets `bins` quantile bins (duplicate edges dropped). They are fitted on the
rows alone, never on labels, so every coalition shares one set of columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin


class QuantileBins(TransformerMixin, BaseEstimator):  # type: ignore[misc]  # sklearn: no hints
    """Each numeric column as the indicators of its bins (module docstring); dense output."""

    def __init__(self, bins: int = 16) -> None:
        self.bins = bins

    def fit(self, X: Any, y: Any = None) -> QuantileBins:  # noqa: N803
        array = np.asarray(X, dtype="float64")
        self.thresholds_ = [_thresholds(array[:, j], self.bins) for j in range(array.shape[1])]
        return self

    def transform(self, X: Any) -> np.ndarray:  # noqa: N803
        array = np.asarray(X, dtype="float64")
        widths = [len(t) + 1 for t in self.thresholds_]
        result = np.zeros((len(array), sum(widths)))
        start = 0
        rows = np.arange(len(array))
        for j, (edges, width) in enumerate(zip(self.thresholds_, widths, strict=True)):
            # As HistGradientBoosting's bin mapper: a value equal to a threshold goes left.
            result[rows, start + np.searchsorted(edges, array[:, j], side="left")] = 1.0
            start += width
        return result

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        names = input_features if input_features is not None else range(len(self.thresholds_))
        pairs = zip(names, self.thresholds_, strict=True)
        names_out = [f"{n}_bin{b}" for n, t in pairs for b in range(len(t) + 1)]
        return np.asarray(names_out, dtype=object)


def _thresholds(column: np.ndarray, bins: int) -> np.ndarray:
    values = np.unique(column[~np.isnan(column)])
    if len(values) <= bins:
        return np.asarray((values[:-1] + values[1:]) / 2.0)
    percentiles = np.linspace(0, 100, num=bins + 1)[1:-1]
    return np.unique(np.percentile(column[~np.isnan(column)], percentiles, method="midpoint"))
