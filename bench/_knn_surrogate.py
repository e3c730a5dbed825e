"""Shared by bench/_faithfulness.py: a nearest-neighbour game for tree estimators, measured
against a random forest's expected game (bench/_expected_game.py) and HistGradientBoosting's
exact game beside the linear stand-in of `pipeline.rewards.surrogate`. Not wired into the
valuation: no setting was closer to the forest's game than the stand-in on both seed pairs of
the bench (docs/valuation-scale.md §5).

A forest of fully grown trees is an adaptive nearest-neighbour method: each benchmark row is
predicted from the training rows that share its leaves, and with fewer rows the leaves, so the
neighbourhoods, widen. The game plays that directly: v(S) is the benchmark metric of the
predictions made from each benchmark row's `k` nearest rows among the coalition's training
rows (the accepted rows and the contributions of S), as an improvement over the accepted rows
alone, in percent, as the other surrogates. This is not KNN-Shapley (which values rows); it
is a coalition game whose every value is cheap: every benchmark row's training rows are sorted
by distance once, and a coalition's `k` nearest are the first of that order among its parts.

Distances (`distance`): "euclidean" on the model's own preprocessing (standardised numbers,
one-hot categories); "importance", the same with each column scaled by the square root of its
importance in one forest fitted on every row (what the forest's splits look at); "proximity",
the fraction of that forest's trees in which two rows share a leaf (the forest's own kernel,
ties broken by the euclidean distance). With `weighted` each neighbour counts by its kernel
(proximity, or 1 / (1 + distance)). Classification: the class of the largest vote;
regression: the mean. Rows of an accepted sample count for the rows they stand for: a
neighbour of weight w fills w of the `k` places.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.spatial.distance import cdist

from bench._prediction_game import PredictionGame
from pipeline.evaluation.metrics import (
    Predictions,
    sorted_labels,
)
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import Recipe, build_estimator, check_estimator
from pipeline.rewards.surrogate import sampled_parts

DISTANCES = ("euclidean", "importance", "proximity")


class KnnSurrogateGame(PredictionGame):
    """v(S) of the `k` nearest coalition rows' predictions (module docstring)."""

    k = 10
    distance = "euclidean"
    weighted = False
    # With `decay` q, the i-th nearest counts q^(i-1) (within the `k` nearest): a bagged
    # 1-nearest-neighbour, which a forest of fully grown trees resembles, weighs its
    # neighbours so (q = 1 - 0.632, the chance a bootstrap draw leaves a row out).
    decay: float | None = None
    # Trees of the forest behind "importance" and "proximity" (None: the recipe's own).
    trees: int | None = None

    def __init__(
        self,
        scorer: BenchmarkScorer,
        base: pd.DataFrame,
        frames: Sequence[pd.DataFrame],
        *,
        higher_is_better: bool,
        max_base_rows: int = 50_000,
    ) -> None:
        self.scorer = scorer
        self.higher_is_better = higher_is_better
        self.classification = scorer.task_type == "classification"
        parts, weight = sampled_parts(scorer, base, frames, max_base_rows)
        self.sample_rows = len(parts[0])
        self.frames = parts
        sizes = [len(p) for p in parts]
        owner = np.repeat(np.arange(len(parts)), sizes)
        train = pd.concat([p for p in parts if len(p)], ignore_index=True)
        rows_weight = np.where(owner == 0, weight, 1.0)
        y = train[scorer.target_column].to_numpy()
        if self.classification:
            self.classes = sorted_labels(set(y.tolist()))
            code = {c: i for i, c in enumerate(self.classes)}
            targets = np.asarray([code[v] for v in y.tolist()], dtype=np.intp)
        else:
            targets = y.astype("float64")
        order, kernel = self._neighbours(train, y)
        # Keep only the columns of `order` a coalition can reach: the accepted rows are in every
        # coalition, so no row's k nearest lie beyond its k-th accepted neighbour.
        base_weight = np.where(owner[order] == 0, rows_weight[order], 0.0).cumsum(axis=1)
        if len(order) and base_weight[:, -1].min() >= self.k:
            reach = int((base_weight < self.k).sum(axis=1).max()) + 1
            order, kernel = order[:, :reach], kernel[:, :reach]
        self.owner = owner[order]
        self.row_weight = rows_weight[order]
        self.targets = targets[order] if len(order) else np.zeros_like(order)
        self.kernel = kernel
        self._start()

    def _neighbours(self, train: pd.DataFrame, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every benchmark row's training rows, nearest first (bench rows x training rows),
        and the kernel weight of each (1 without `weighted`)."""
        if train.empty:
            empty = np.zeros((len(self.scorer.bench), 0))
            return empty.astype(np.intp), empty
        columns = self.scorer.feature_columns(train)
        recipe = self.scorer.recipe or Recipe(check_estimator(self.scorer.task_type, None))
        features = build_estimator(recipe, self.scorer.task_type)["features"]
        x_train = _dense(features.fit_transform(train[columns]))
        x_bench = _dense(features.transform(self.scorer.bench[columns]))
        forest: Any = None
        if self.distance in ("importance", "proximity"):
            forest = self._forest(recipe, x_train, y)
        if self.distance == "importance":
            scale = np.sqrt(forest.feature_importances_)
            x_train, x_bench = x_train * scale, x_bench * scale
        distances = cdist(x_bench, x_train)
        if self.distance == "proximity":
            proximity = _proximity(forest.apply(x_bench), forest.apply(x_train))
            order = np.lexsort((distances, -proximity), axis=1)
            kernel = np.take_along_axis(proximity, order, axis=1)
        else:
            order = np.argsort(distances, axis=1, kind="stable")
            kernel = 1.0 / (1.0 + np.take_along_axis(distances, order, axis=1))
        if not self.weighted:
            kernel = np.ones_like(kernel)
        return order, kernel

    def _forest(self, recipe: Recipe, x_train: np.ndarray, y: np.ndarray) -> Any:
        """A random forest of the task fitted once on every row: the recipe's own when it is
        one, else the catalog's."""
        name = f"random_forest_{'classifier' if self.classification else 'regressor'}"
        params = dict(recipe.params) if recipe.estimator == name else {}
        if self.trees is not None:
            params["n_estimators"] = self.trees
        model = build_estimator(Recipe(name, params), self.scorer.task_type)["model"]
        return model.fit(x_train, y)

    def _taken(self, coalition: frozenset[int]) -> np.ndarray:
        """How much each sorted neighbour counts for the coalition (bench rows x columns)."""
        members = np.zeros(len(self.frames), dtype=bool)
        members[[0, *(j + 1 for j in coalition)]] = True
        weight = np.where(members[self.owner], self.row_weight, 0.0)
        filled = weight.cumsum(axis=1)
        taken = np.clip(self.k - (filled - weight), 0.0, weight)
        if self.decay is not None:
            taken = taken * self.decay ** (filled - weight)
        return taken * self.kernel

    def _predictions(self, coalition: frozenset[int]) -> Predictions:
        taken = self._taken(coalition)
        total = taken.sum(axis=1)
        if not total.any():
            parts = [self.frames[0], *(self.frames[j + 1] for j in sorted(coalition))]
            return self.scorer.predict(pd.concat(parts, ignore_index=True))
        name, y_true = self.scorer.metric.name, self.scorer.y_true
        safe = np.where(total > 0, total, 1.0)
        if not self.classification:
            return Predictions(name, y_true, (taken * self.targets).sum(axis=1) / safe)
        votes = np.stack(
            [(taken * (self.targets == c)).sum(axis=1) for c in range(len(self.classes))], axis=1
        )
        return self._class_predictions(votes / safe[:, None])


def knn(
    k: int = 10,
    distance: str = "euclidean",
    weighted: bool = False,
    trees: int | None = None,
    decay: float | None = None,
) -> type[KnnSurrogateGame]:
    """A `KnnSurrogateGame` with other settings."""
    assert distance in DISTANCES, distance
    settings = {"k": k, "distance": distance, "weighted": weighted, "trees": trees, "decay": decay}
    return type("KnnSurrogateGame", (KnnSurrogateGame,), settings)


def _proximity(bench_leaves: np.ndarray, train_leaves: np.ndarray) -> np.ndarray:
    """The fraction of trees in which each benchmark row and each training row share a leaf."""
    shared = np.zeros((len(bench_leaves), len(train_leaves)))
    for t in range(bench_leaves.shape[1]):
        shared += bench_leaves[:, t, None] == train_leaves[None, :, t]
    return shared / max(bench_leaves.shape[1], 1)


def _dense(matrix: Any) -> np.ndarray:
    to_array = getattr(matrix, "toarray", None)
    return np.asarray(to_array() if to_array is not None else matrix, dtype="float64")


# The variants the bench measures by name (`--surrogates`): the euclidean one on the model's
# preprocessing, and the forest's proximity (neighbours weighted by it, from a forest of 100
# trees); both with 10 neighbours, as chosen on seeds 0-1 (docs/valuation-scale.md §5).
KNN_GAMES: dict[str, type[KnnSurrogateGame]] = {
    "knn": knn(10, "euclidean"),
    "knn-proximity": knn(10, "proximity", weighted=True, trees=100),
}
