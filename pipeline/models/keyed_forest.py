"""Random forests whose bootstrap is drawn from the rows' content, not their positions.

scikit-learn draws each tree's bootstrap as positions in the training matrix: one row fewer,
or the rows in another order, and every tree sees other rows. Here, given `row_keys`
(`pipeline.models.row_keys`, passed by the scorer as a fit parameter), each tree weighs each
row by a Poisson count drawn from the row's key and the tree's seed, which is the bootstrap
of a large frame (sklearn's counts are multinomial, nearly Poisson(1)) and `max_samples` as
the rate. One row fewer changes only that row's weight in every tree. Without keys (or with
`oob_score`, which needs sklearn's own draws) the forest is sklearn's.
Imported only when a pipeline is built (scikit-learn is heavy to import).
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

import numpy as np
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from pipeline.models.row_keys import poisson_counts


class _KeyedFit:
    """Mixed into a tree: `_fit` multiplies the sample weights by its keyed bootstrap."""

    _bootstrap_keys: np.ndarray | None = None
    _bootstrap_rate: float = 1.0
    random_state: Any

    def _fit(self, X: Any, y: Any, sample_weight: Any = None, **params: Any) -> Any:  # noqa: N803
        keys = self._bootstrap_keys
        if keys is not None:
            counts = poisson_counts(keys, int(self.random_state), self._bootstrap_rate)
            if not counts.any():
                # A tiny frame can draw no row at all for a tree (e^-n for n rows), which a
                # tree cannot fit: that tree sees every row once instead.
                counts = np.ones_like(counts)
            sample_weight = counts if sample_weight is None else counts * sample_weight
        return super()._fit(X, y, sample_weight=sample_weight, **params)  # type: ignore[misc]


class _KeyedTreeClassifier(_KeyedFit, DecisionTreeClassifier):  # type: ignore[misc]
    pass


class _KeyedTreeRegressor(_KeyedFit, DecisionTreeRegressor):  # type: ignore[misc]
    pass


class _KeyedForest:
    """The fit of a keyed forest (module docstring); mixed into sklearn's forests."""

    _tree_class: type[Any]
    bootstrap: bool
    oob_score: Any
    max_samples: Any
    estimator: Any
    estimators_: list[Any]

    def fit(self, X: Any, y: Any, sample_weight: Any = None, row_keys: Any = None) -> Any:  # noqa: N803
        parent: Any = super()
        if row_keys is None or not self.bootstrap or self.oob_score:
            return parent.fit(X, y, sample_weight=sample_weight)
        keys = np.asarray(row_keys, dtype=np.uint64)
        rows = len(keys)
        rate = self.max_samples
        if rate is None:
            rate = 1.0
        elif isinstance(rate, Integral):
            rate = min(1.0, int(rate) / max(rows, 1))
        self._keys, self._rate = keys, float(rate)
        estimator, max_samples = self.estimator, self.max_samples
        # sklearn's own draws off (it refuses max_samples without them); the trees draw theirs.
        self.bootstrap, self.estimator, self.max_samples = False, self._tree_class(), None
        try:
            parent.fit(X, y, sample_weight=sample_weight)
        finally:
            self.bootstrap, self.estimator, self.max_samples = True, estimator, max_samples
            del self._keys, self._rate
            for tree in getattr(self, "estimators_", []):
                tree._bootstrap_keys = None
        return self

    def _make_estimator(self, append: bool = True, random_state: Any = None) -> Any:
        parent: Any = super()
        tree = parent._make_estimator(append=append, random_state=random_state)
        keys = getattr(self, "_keys", None)
        if keys is not None:
            tree._bootstrap_keys, tree._bootstrap_rate = keys, self._rate
        return tree


class KeyedRandomForestClassifier(_KeyedForest, RandomForestClassifier):  # type: ignore[misc]
    """sklearn's RandomForestClassifier with a bootstrap drawn from `row_keys`."""

    _tree_class = _KeyedTreeClassifier


class KeyedRandomForestRegressor(_KeyedForest, RandomForestRegressor):  # type: ignore[misc]
    """sklearn's RandomForestRegressor with a bootstrap drawn from `row_keys`."""

    _tree_class = _KeyedTreeRegressor
