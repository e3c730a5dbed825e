"""Shared by bench/_faithfulness.py: a tree surrogate for a random forest's game, measured
against the forest's expected game (bench/_expected_game.py) beside the linear stand-in of
`pipeline.rewards.surrogate`. Not wired into the valuation: it is not closer to the forest's
expected game than the stand-in (docs/valuation-scale.md §5).

The model's forest is fitted once on every row (the accepted rows, then each contribution);
each coalition is valued by re-estimating every tree's leaves from the coalition's own rows:
class counts per leaf (classification) or target sums and counts (regression), kept per part
so that a coalition's are sums over its members. A benchmark row's tree prediction is its
leaf's estimate; with `parent`, a leaf with no row of the coalition falls back to its deepest
ancestor holding some (what a tree grown on the coalition alone would come closer to), without
it the tree is skipped for that row (no tree left: the coalition's class frequencies or mean).
With `bootstrap` each row counts as often as the tree drew it, so the whole batch reproduces
the fitted forest exactly; without it every row counts once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench._prediction_game import PredictionGame
from pipeline.evaluation.metrics import Predictions
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import build_estimator


class TreeSurrogateGame(PredictionGame):
    """v(S) of the re-estimated forest, in percent improvement (the module docstring)."""

    def __init__(
        self,
        scorer: BenchmarkScorer,
        base: pd.DataFrame,
        frames: Sequence[pd.DataFrame],
        *,
        higher_is_better: bool,
        bootstrap: bool,
        parent: bool,
    ) -> None:
        assert scorer.recipe is not None
        self.scorer = scorer
        self.higher_is_better = higher_is_better
        self.classification = scorer.task_type == "classification"
        parts = [scorer.labelled(f) for f in (base, *frames)]
        self.sizes = [len(p) for p in parts]
        train = pd.concat([p for p in parts if len(p)], ignore_index=True)
        columns = scorer.feature_columns(train)
        y = train[scorer.target_column].to_numpy()
        pipeline = build_estimator(scorer.recipe, scorer.task_type, rows=len(train))
        pipeline.fit(train[columns], y)
        features, model = pipeline["features"], pipeline["model"]
        leaves = model.apply(features.transform(train[columns]))  # rows x trees
        self.bench_leaves = model.apply(features.transform(scorer.bench[columns]))
        owner = np.repeat(np.arange(len(parts)), self.sizes)
        if self.classification:
            self.classes = list(model.classes_)
            code = {c: i for i, c in enumerate(self.classes)}
            labels = np.asarray([code[v] for v in y.tolist()], dtype=np.intp)
            channels = len(self.classes)
        else:
            labels, channels = np.zeros(len(y), dtype=np.intp), 2  # target sum, count
        weights = _draws(model, len(train)) if bootstrap else np.ones((len(leaves.T), len(y)))
        # Per tree: every node's statistics per part (parts x nodes x channels), and parents.
        self.nodes: list[np.ndarray] = []
        self.parents: list[np.ndarray] = []
        self.parent = parent
        for t, tree in enumerate(model.estimators_):
            size = tree.tree_.node_count
            cell = (owner * size + leaves[:, t]) * channels
            if self.classification:
                stats = np.bincount(
                    cell + labels, weights=weights[t], minlength=len(parts) * size * channels
                )
            else:
                target = weights[t] * y.astype("float64")
                stats = np.bincount(cell, weights=target, minlength=len(parts) * size * 2)
                stats += np.bincount(cell + 1, weights=weights[t], minlength=len(parts) * size * 2)
            stats = stats.reshape(len(parts), size, channels)
            parents = _parents(tree.tree_)
            self.nodes.append(_propagate(parents, stats) if parent else stats)
            self.parents.append(parents)
        self._start()

    def _members(self, coalition: frozenset[int]) -> list[int]:
        return [i for i in (0, *(j + 1 for j in sorted(coalition))) if self.sizes[i]]

    def _leaf_totals(self, members: list[int]) -> np.ndarray:
        """The coalition's statistics of each benchmark row's node in each tree."""
        columns = []
        for t, (stats, parents) in enumerate(zip(self.nodes, self.parents, strict=True)):
            totals = stats[members].sum(axis=0)  # nodes x channels
            weight = totals.sum(axis=-1) if self.classification else totals[:, 1]
            node = self.bench_leaves[:, t].copy()
            while self.parent:
                empty = (weight[node] <= 0) & (parents[node] >= 0)
                if not empty.any():
                    break
                node[empty] = parents[node[empty]]
            columns.append(totals[node])
        return np.stack(columns, axis=1)  # bench rows x trees x channels

    def _predictions(self, coalition: frozenset[int]) -> Predictions:
        members = self._members(coalition)
        name, y_true = self.scorer.metric.name, self.scorer.y_true
        if not members:
            return self.scorer.predict(pd.DataFrame())
        total = self._leaf_totals(members)
        if not self.classification:
            count = total[..., 1]
            has = count > 0
            means = np.where(has, total[..., 0] / np.where(has, count, 1.0), 0.0)
            used = has.sum(axis=1)
            overall = total[..., 0].sum() / max(count.sum(), 1e-12)
            values = np.where(used > 0, means.sum(axis=1) / np.maximum(used, 1), overall)
            return Predictions(name, y_true, values)
        count = total.sum(axis=-1, keepdims=True)
        fractions = np.where(count > 0, total / np.where(count > 0, count, 1.0), 0.0)
        used = (count[..., 0] > 0).sum(axis=1)
        proba = fractions.sum(axis=1) / np.maximum(used, 1)[:, None]
        prior = total.sum(axis=(0, 1))
        proba[used == 0] = prior / max(prior.sum(), 1e-12)
        return self._class_predictions(proba)


def _draws(model: Any, rows: int) -> np.ndarray:
    """How often each tree drew each training row (trees x rows)."""
    if not model.bootstrap:
        return np.ones((len(model.estimators_), rows))
    # estimators_samples_: each tree's drawn row indices, repeats included.
    return np.stack(
        [np.bincount(drawn, minlength=rows) for drawn in model.estimators_samples_]
    ).astype("float64")


def _parents(tree: Any) -> np.ndarray:
    parents = np.full(tree.node_count, -1)
    left, right = tree.children_left, tree.children_right
    inner = np.flatnonzero(left >= 0)
    parents[left[inner]] = inner
    parents[right[inner]] = inner
    return parents


def _propagate(parents: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """Leaf statistics (parts x nodes x channels) summed into every ancestor."""
    total = stats.copy()
    # Children are numbered after their parents: one pass from the last node up.
    for node in range(len(parents) - 1, 0, -1):
        total[:, parents[node]] += total[:, node]
    return total
