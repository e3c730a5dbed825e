"""One-hot encoding whose category cap costs nothing while no column reaches it.

scikit-learn's OneHotEncoder counts every category of every column as soon as `max_categories`
is set, one Python call per cell of a text column: a third of the preprocessing's fit here. The
cap groups categories only in a column with at least `max_categories` of them (`_identify_
infrequent`: `max_categories` counts the infrequent column too), so while every column has fewer
distinct values the encoder is fitted without it: the same categories, columns and output.
Imported by `pipeline.models.preprocessing` when it builds a preprocessor (scikit-learn is heavy
to import).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.preprocessing import OneHotEncoder


class CappedOneHotEncoder(OneHotEncoder):  # type: ignore[misc]  # sklearn has no type hints
    """OneHotEncoder that counts categories only when a column may reach `max_categories`."""

    def fit(self, X: Any, y: Any = None) -> CappedOneHotEncoder:  # noqa: N803
        cap: int | None = self.get_params(deep=False)["max_categories"]
        if cap is None or self.min_frequency is not None or not _fewer_values(X, cap):
            super().fit(X, y)
            return self
        self.max_categories = None
        try:
            super().fit(X, y)
        finally:
            self.max_categories = cap  # the parameter as set: clones and reprs unchanged
        return self


def _fewer_values(frame: Any, limit: int) -> bool:
    """Whether every column holds fewer than `limit` distinct values (NaN counted apart each
    time: a column of gaps is counted, never wrongly passed)."""
    array = frame.to_numpy(dtype=object) if hasattr(frame, "iloc") else np.asarray(frame)
    array = array.reshape(len(array), -1)
    return all(len(set(array[:, j].tolist())) < limit for j in range(array.shape[1]))
