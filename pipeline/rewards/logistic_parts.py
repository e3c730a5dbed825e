"""A part's rows as the logistic surrogate fits read them (`pipeline.rewards.surrogate_fits`,
`pipeline.rewards.anchored_passes`): features, labels, weights and the products every pass
reuses, computed once per part."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class LogisticPart:
    """A part's rows for the logistic fits: features, one-hot labels (binomial: the second
    class's column only), weights."""

    x: np.ndarray
    y: np.ndarray
    weight: np.ndarray

    @cached_property
    def weighted_t(self) -> np.ndarray:
        """(W X)ᵀ, features x rows: a gradient is (W X)ᵀ (Y − P), one product per pass."""
        return np.ascontiguousarray((self.x * self.weight[:, None]).T)

    @cached_property
    def label_moment(self) -> np.ndarray:
        """(W X)ᵀ Y as outputs x features: the part of the gradient that never changes."""
        return np.asarray((self.weighted_t @ self.y).T)

    @cached_property
    def single(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """X, (W X)ᵀ and Y in float32, for the coarse passes (`COARSE_STEP`)."""
        as32 = [np.asarray(a, dtype=np.float32) for a in (self.x, self.weighted_t, self.y)]
        return as32[0], as32[1], as32[2]
