"""Shared by bench/_faithfulness.py: a binned stand-in for tree estimators, measured beside the
linear stand-in of `pipeline.rewards.surrogate` (docs/valuation-scale.md §5).

The same game and fits as the stand-in (L2 logistic or ridge regression, the coalitions' fits by
d × d solves), on other features: each numeric column one-hot into `BINS` bins
(`pipeline.rewards.binned_features.QuantileBins`, thresholds as HistGradientBoosting's own,
fitted on the rows, never on labels), categoricals one-hot as in the model's preprocessing, so a
linear model bends like a sum of trees' steps. The penalty is `PENALTY` per bin coefficient: a
bin moves about as far as its rows outweigh it, as a HistGradientBoosting leaf needs
`min_samples_leaf` (20) rows; with the raw standardised value kept beside the bins
(`keep_value`) its column is penalised as the stand-in's are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np

from pipeline.models.estimators import Recipe
from pipeline.rewards import valuation
from pipeline.rewards.binned_features import QuantileBins
from pipeline.rewards.surrogate import SurrogateGame
from pipeline.rewards.surrogate_fits import STAND_IN_PENALTY, Objective

BINS = 16
PENALTY = 10.0


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
def playing(game: type[SurrogateGame]) -> Iterator[None]:
    """`value_batch` splits large batches with `game` instead of the valuation's own surrogate
    (for the bench only: the valuation has no such setting)."""
    with mock.patch.object(valuation, "SurrogateGame", game):
        yield
