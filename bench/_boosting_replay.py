"""Shared by bench/_faithfulness.py: a fixed-structure boosting replay for HistGradientBoosting,
measured beside the linear stand-in of `pipeline.rewards.surrogate`. Not wired into the
valuation: it is not clearly closer to HistGradientBoosting's game than the stand-in, and a
batch of 16 costs about 27 plain fits with it (docs/valuation-scale.md §5).

The model's pipeline (its recipe, its seed) is fitted once on the accepted rows and the whole
batch. Its trees' structures (splits) are kept, and every row's leaf in every tree is computed
once (accepted, contributions and benchmark rows). A coalition S is valued by *replaying* the
boosting on its own rows R_S with those structures: from HistGradientBoosting's own baseline
on R_S (the loss's intercept-only fit: log-odds of the class prior, per class, or the mean),
each iteration takes the loss's gradients and hessians of R_S's rows at their current raw
predictions (float32, as scikit-learn stores them), sums them per leaf and sets each leaf as
scikit-learn's `compute_node_value` then shrinkage do: −learning_rate · G / (H + l2 + 1e-15).
A tree that is a single leaf predicts 0, as scikit-learn's. The benchmark is scored with the
model's metric on the classes HistGradientBoosting's `predict` gives. With every row the
replay is the fitted model (tested in `check_replay`).

A leaf that holds few or no rows of R_S is the weak point (a model fitted on R_S would not
have it): `empty` says what it gets: "zero" (its G and H are 0, so is its value), "parent"
(no row of R_S: the value of its deepest ancestor holding some), "pooled" (fewer weighted rows
than the model's `min_samples_leaf`: its deepest ancestor holding that many, else the root).
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
from pipeline.rewards.surrogate import sampled_parts

EMPTY_POLICIES = ("zero", "parent", "pooled")


class _Tree:
    """One fitted tree's structure: each row's leaf, and per leaf its ancestors."""

    def __init__(self, predictor: Any, x_train: np.ndarray, x_bench: np.ndarray, model: Any):
        nodes = predictor.nodes
        self.size = len(nodes)
        self.single = self.size == 1
        self.train = _leaves(predictor, x_train, model)
        self.bench = _leaves(predictor, x_bench, model)
        # Preorder numbering (scikit-learn's `_fill_predictor_arrays`): a parent before its
        # children, so one pass gives every node's parent and a path up from each node.
        parent = np.full(self.size, -1, dtype=np.intp)
        inner = np.flatnonzero(~nodes["is_leaf"].astype(bool))
        parent[nodes["left"][inner]] = inner
        parent[nodes["right"][inner]] = inner
        depth = int(nodes["depth"].max()) + 1
        # paths[n]: n, its parent, ... up to the root, then the root repeated.
        paths = np.zeros((self.size, depth), dtype=np.intp)
        paths[:, 0] = np.arange(self.size)
        for d in range(1, depth):
            up = parent[paths[:, d - 1]]
            paths[:, d] = np.where(up >= 0, up, paths[:, d - 1])
        self.paths = paths
        # ancestors[a, n] = 1 when a is n or one of its ancestors: node sums from leaf sums.
        self.ancestors = np.zeros((self.size, self.size))
        for d in range(depth):
            self.ancestors[paths[:, d], np.arange(self.size)] = 1.0


def _leaves(predictor: Any, x: np.ndarray, model: Any) -> np.ndarray:
    """Each row's leaf: the predictor's own traversal (thresholds, missing values) with every
    node's value set to its index."""
    from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor

    nodes = predictor.nodes.copy()
    nodes["value"] = np.arange(len(nodes), dtype="float64")
    bitsets = predictor.binned_left_cat_bitsets, predictor.raw_left_cat_bitsets
    indexer = TreePredictor(nodes, *bitsets)
    known, f_idx_map = model._bin_mapper.make_known_categories_bitsets()
    return indexer.predict(x, known, f_idx_map, 1).astype(np.intp)


class BoostingReplayGame(PredictionGame):
    """v(S) of the replayed boosting, in percent improvement (the module docstring)."""

    empty = "zero"

    def __init__(
        self,
        scorer: BenchmarkScorer,
        base: pd.DataFrame,
        frames: Sequence[pd.DataFrame],
        *,
        max_base_rows: int,
        higher_is_better: bool,
    ) -> None:
        assert scorer.recipe is not None and self.empty in EMPTY_POLICIES
        self.scorer = scorer
        self.higher_is_better = higher_is_better
        self.classification = scorer.task_type == "classification"
        self.parts, weight = sampled_parts(scorer, base, frames, max_base_rows)
        sample = self.parts[0]
        self.sample_rows = len(sample)
        self.sizes = [len(p) for p in self.parts]
        train = pd.concat([p for p in self.parts if len(p)], ignore_index=True)
        self.weights = None if weight == 1.0 else np.ones(len(train))
        if self.weights is not None:
            self.weights[: len(sample)] = weight
        self.columns = scorer.feature_columns(train)
        y = train[scorer.target_column].to_numpy()
        pipeline = build_estimator(scorer.recipe, scorer.task_type, rows=len(train))
        fit_params = {} if self.weights is None else {"model__sample_weight": self.weights}
        pipeline.fit(train[self.columns], y, **fit_params)
        features, model = pipeline["features"], pipeline["model"]
        self.pipeline, self.model = pipeline, model
        x_train = model._preprocess_X(features.transform(train[self.columns]), reset=False)
        x_bench = model._preprocess_X(features.transform(scorer.bench[self.columns]), reset=False)
        self.x_bench = x_bench
        self.y = model._encode_y(y) if self.classification else y.astype("float64")
        if self.classification:
            self.classes = model.classes_
        self.loss = model._loss
        self.k = model.n_trees_per_iteration_
        self.trees = [[_Tree(p, x_train, x_bench, model) for p in it] for it in model._predictors]
        self.rate = float(model.learning_rate)
        self.l2 = float(model.l2_regularization)
        self.min_leaf = float(model.min_samples_leaf)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)])
        self._start()

    def _members(self, coalition: frozenset[int]) -> list[int]:
        return [i for i in (0, *(j + 1 for j in sorted(coalition))) if self.sizes[i]]

    def rows(self, members: Sequence[int]) -> np.ndarray:
        return np.concatenate([np.arange(self.starts[i], self.starts[i + 1]) for i in members])

    def raw(self, rows: np.ndarray) -> np.ndarray:
        """The benchmark's raw predictions (rows x trees per iteration) of the boosting
        replayed on the training rows `rows`."""
        y = self.y[rows]
        w = None if self.weights is None else self.weights[rows]
        baseline = self.loss.fit_intercept_only(y_true=y, sample_weight=w).reshape(1, -1)
        raw = np.zeros((len(rows), self.k), order="F") + baseline
        raw_bench = np.zeros((len(self.x_bench), self.k)) + baseline
        shape = (len(rows),) if self.k == 1 else (len(rows), self.k)
        gradient = np.empty(shape, dtype=np.float32, order="F")
        hessian = np.empty(shape, dtype=np.float32, order="F")
        count = np.ones(len(rows)) if w is None else w
        for trees in self.trees:
            self.loss.gradient_hessian(
                y_true=y,
                raw_prediction=raw[:, 0] if self.k == 1 else raw,
                sample_weight=w,
                gradient_out=gradient,
                hessian_out=hessian,
            )
            g = gradient.reshape(len(rows), -1).astype("float64")
            h = hessian.reshape(len(rows), -1).astype("float64")
            for k, tree in enumerate(trees):
                if tree.single:
                    continue  # a single leaf predicts 0 (scikit-learn's root value)
                leaves = tree.train[rows]
                value = self._leaf_values(
                    tree,
                    np.bincount(leaves, g[:, k], tree.size),
                    np.bincount(leaves, h[:, k], tree.size),
                    np.bincount(leaves, count, tree.size),
                )
                raw[:, k] += value[leaves]
                raw_bench[:, k] += value[tree.bench]
        return raw_bench

    def _leaf_values(self, tree: _Tree, g: np.ndarray, h: np.ndarray, n: np.ndarray) -> np.ndarray:
        if self.empty == "zero":
            return (-g / (h + self.l2 + 1e-15)) * self.rate
        g, h, n = tree.ancestors @ g, tree.ancestors @ h, tree.ancestors @ n
        enough = n > 0 if self.empty == "parent" else n >= self.min_leaf
        # The first node on each node's path up that holds enough rows (else the root).
        ok = enough[tree.paths]
        first = np.where(ok.any(axis=1), ok.argmax(axis=1), tree.paths.shape[1] - 1)
        node = tree.paths[np.arange(tree.size), first]
        return (-g[node] / (h[node] + self.l2 + 1e-15)) * self.rate

    def _predictions(self, coalition: frozenset[int]) -> Predictions:
        members = self._members(coalition)
        frames = [self.parts[i] for i in members]
        target = self.scorer.target_column
        trivial = not members or (self.classification and pd.concat(frames)[target].nunique() < 2)
        if trivial:
            return self.scorer.predict(pd.concat(frames) if frames else pd.DataFrame())
        raw = self.raw(self.rows(members))
        return self.predictions(raw)

    def predictions(self, raw: np.ndarray) -> Predictions:
        name, y_true = self.scorer.metric.name, self.scorer.y_true
        if not self.classification:
            return Predictions(name, y_true, raw[:, 0])
        proba = self.loss.predict_proba(raw[:, 0] if self.k == 1 else raw)
        return self._class_predictions(proba)


def replay(empty: str) -> type[BoostingReplayGame]:
    """A `BoostingReplayGame` whose leaves without enough coalition rows follow `empty`."""
    return type("BoostingReplayGame", (BoostingReplayGame,), {"empty": empty})


def check_replay(game: BoostingReplayGame) -> float:
    """The largest difference between the replay on every row and the fitted model's own raw
    predictions on the benchmark (0 up to rounding when the replay is right)."""
    every = game.rows([i for i, size in enumerate(game.sizes) if size])
    return float(np.max(np.abs(game.raw(every) - game.model._raw_predict(game.x_bench))))
