"""Shared by bench/_faithfulness.py: a binned stand-in for tree estimators, measured beside the
linear stand-in of `pipeline.rewards.surrogate`. Not wired into the valuation: it is not
clearly closer to HistGradientBoosting's or a random forest's game than the linear stand-in
(docs/valuation-scale.md §5).

The same game and fits as the stand-in (L2 logistic or ridge regression, each coalition's fit
by d × d solves), on other features: each numeric column one-hot into `BINS` bins
(`QuantileBins`: thresholds found as HistGradientBoosting finds its own, fitted on the rows,
never on labels or on a coalition's model), categoricals one-hot as in the model's
preprocessing, so that the linear model is a sum of step functions of single features, as
shallow trees are. `PENALTY` (10) per bin coefficient, chosen on the bench's seeds 0-1 among
4-32 bins and penalties 1-50 (it outweighs a bin that few of a coalition's rows fall in,
as a HistGradientBoosting leaf needs `min_samples_leaf`, 20, rows); with `keep_value`, each
column's standardised value beside its bins, penalised as the stand-in's columns are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin

from pipeline.models.estimators import Recipe
from pipeline.rewards import valuation
from pipeline.rewards.surrogate import SurrogateGame
from pipeline.rewards.surrogate_objective import STAND_IN_PENALTY, Objective

BINS = 16
PENALTY = 10.0


class QuantileBins(TransformerMixin, BaseEstimator):  # type: ignore[misc]  # sklearn: no hints
    """Each numeric column as the indicators of its bins; dense output. A column with at most
    `bins` distinct values gets one bin per value, one with more `bins` quantile bins
    (duplicate edges dropped), as HistGradientBoosting's `_find_binning_thresholds`."""

    def __init__(self, bins: int = BINS) -> None:
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
    """Bin edges: midpoints between distinct values, or between quantiles (`QuantileBins`)."""
    values = np.unique(column[~np.isnan(column)])
    if len(values) <= bins:
        return np.asarray((values[:-1] + values[1:]) / 2.0)
    percentiles = np.linspace(0, 100, num=bins + 1)[1:-1]
    return np.unique(np.percentile(column[~np.isnan(column)], percentiles, method="midpoint"))


class StandInGame(SurrogateGame):
    """The linear stand-in (penalty `STAND_IN_PENALTY` on the model's own preprocessing),
    whatever the valuation plays for the estimator."""

    def _objective(self) -> Objective:
        return Objective(STAND_IN_PENALTY, False)


class BinnedSurrogateGame(SurrogateGame):
    """The stand-in's game on binned numeric columns (module docstring)."""

    bins = BINS
    penalty = PENALTY
    keep_value = False

    def _objective(self) -> Objective:
        return Objective(self.penalty, False)

    def _preprocessing(self, recipe: Recipe) -> Any:
        from sklearn.pipeline import FeatureUnion
        from sklearn.preprocessing import StandardScaler

        features = super()._preprocessing(recipe)
        parts: list[tuple[str, Any]] = [("bins", QuantileBins(self.bins))]
        if self.keep_value:
            parts.insert(0, ("value", StandardScaler()))
        features.set_params(numeric__scale=FeatureUnion(parts))
        return features

    def _bulk(self, train: pd.DataFrame, bench: pd.DataFrame, recipe: Recipe) -> None:
        return None  # the bulk path computes the model's own preprocessing, not the bins

    def _scaled(self, features: Any, width: int) -> np.ndarray:
        scaled = np.zeros(width, dtype=bool)
        if self.keep_value and "numeric" in features.named_transformers_:
            numeric = features.output_indices_["numeric"]
            union = features.named_transformers_["numeric"]["scale"]
            count = len(union.transformer_list[0][1].scale_)
            scaled[numeric.start : numeric.start + count] = True
        return scaled


def binned(bins: int = BINS, penalty: float = PENALTY, keep_value: bool = False) -> type:
    """A `BinnedSurrogateGame` with other settings."""
    settings = {"bins": bins, "penalty": penalty, "keep_value": keep_value}
    return type("BinnedSurrogateGame", (BinnedSurrogateGame,), settings)


@contextmanager
def playing(game: type[Any]) -> Iterator[None]:
    """`value_batch` splits large batches with `game` (a class built as `SurrogateGame` is)
    instead of the valuation's own surrogate (for the bench only: the valuation has no such
    setting)."""
    with mock.patch.object(valuation, "SurrogateGame", game):
        yield
