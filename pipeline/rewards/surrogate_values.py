"""The surrogate game's values in bulk (`pipeline.rewards.surrogate.SurrogateGame`): every
fitted coalition's benchmark metric at once, from one product of the benchmark rows with the
coalitions' coefficients, then the metric on label codes (accuracy, f1) or on the matrix of
values (regression). A binomial coalition's classes are computed only on the benchmark rows
whose class the full fit does not settle, and its accuracy counts the settled rows' right
answers once. roc_auc, coalitions missing a class and trivial baselines are valued one by one
by the game itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np

from pipeline.evaluation.metrics import code_columns, sorted_labels, value_columns
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.anchored_passes import CHUNK_CELLS


class BulkValues:
    """The values part of the surrogate game: what it needs of the game is declared here."""

    scorer: BenchmarkScorer
    classification: bool
    classes: list[Any]
    x_bench: np.ndarray
    full_fit: np.ndarray
    _fits: dict[frozenset[int], Any]
    _values: dict[frozenset[int], float]

    def _members(self, coalition: frozenset[int]) -> list[int]:
        raise NotImplementedError

    def _improvement(self, score: float) -> float:
        raise NotImplementedError

    def _bulk_values(self, coalitions: Sequence[frozenset[int]]) -> None:
        """The values of fitted coalitions at once: one product of the benchmark rows with
        every coalition's coefficients, then the metric on label codes or on the matrix of
        values. roc_auc, coalitions missing a class and trivial baselines go one by one
        (`_predictions`)."""
        if self.scorer.metric.uses_probabilities:
            return
        full = len(self.classes) if self.classification else 0
        done = [c for c in coalitions if c not in self._values and self._fits.get(c) is not None]
        done = [c for c in done if len(self._fits[c][0] or ()) == full and self._members(c)]
        if not done:
            return
        betas = np.stack([self._fits[c][1] for c in done])  # coalitions x [outputs x] features
        # Benchmark rows x coalitions x outputs cells (and temporaries as large) at once run
        # out of memory on a large benchmark: coalitions in slices of about CHUNK_CELLS.
        outputs = betas.shape[1] if betas.ndim == 3 else 1
        chunk = max(1, CHUNK_CELLS // max(len(self.x_bench) * outputs, 1))
        for start in range(0, len(done), chunk):
            scores = self._chunk_scores(betas[start : start + chunk])
            self._values.update(
                (c, self._improvement(float(v)))
                for c, v in zip(done[start : start + chunk], scores, strict=True)
            )

    def _chunk_scores(self, betas: np.ndarray) -> np.ndarray:
        """The metric of each coalition's coefficients in `betas` (`_bulk_values`)."""
        if self.classification and len(self.classes) == 2:
            if self.scorer.metric.name == "accuracy":
                return self._binomial_accuracy(betas[:, 0, :])
            return self._code_scores(self._positive(betas[:, 0, :]))
        eta = self.x_bench @ betas.reshape(-1, betas.shape[-1]).T
        if not self.classification:
            return value_columns(self.scorer.metric.name, self.scorer.y_true, eta)
        eta = eta.reshape(len(eta), len(betas), -1)
        # The class of the largest linear predictor, as scikit-learn's `predict` (the largest
        # probability too, without computing them); binomial: the second class where η > 0.
        codes = eta[..., 0] > 0.0 if len(self.classes) == 2 else eta.argmax(axis=-1)
        return self._code_scores(codes)

    def _positive(self, betas: np.ndarray) -> np.ndarray:
        """Binomial: whether η > 0 (the second class) for each benchmark row (rows) and
        coalition (columns) of `betas` (coalitions x features), `_open_rows` computed."""
        open_rows, open_positive = self._open_rows(betas)
        positive = np.repeat((self._bench_at_full[0] > 0.0)[:, None], len(betas), axis=1)
        positive[open_rows] = open_positive
        return positive

    def _open_rows(self, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Binomial: the benchmark rows whose class some coalition of `betas` may change, and
        whether η > 0 there (rows x coalitions). A row's η with a coalition is its η with the
        full fit, η*, moved by at most |x| · max |β − β*| over the coalitions here: a row whose
        |η*| is beyond that (with a margin far above the rounding of either product) has the
        sign of η* with every coalition, and only the other rows (a few in ten at 10,000
        accepted churn rows) are multiplied by every coalition's coefficients."""
        full = self.full_fit[0]
        eta_full, x_abs = self._bench_at_full
        reach = x_abs @ np.max(np.abs(betas - full), axis=0)
        margin = 1e-9 * (x_abs @ np.abs(full) + reach)
        if not np.isfinite(margin).all():  # a NaN coefficient settles nothing: every row open
            open_rows = np.arange(len(eta_full))
        else:
            open_rows = np.flatnonzero(np.abs(eta_full) <= reach + margin)
        return open_rows, (self.x_bench[open_rows] @ betas.T) > 0.0

    def _binomial_accuracy(self, betas: np.ndarray) -> np.ndarray:
        """Binomial accuracy of each coalition of `betas`: the settled rows' right answers
        are the full fit's, counted once, and only the open rows' per coalition (`_open_rows`;
        the same counts, so the same floats, as over every row)."""
        open_rows, open_positive = self._open_rows(betas)
        truth, right = self._truth_at_full
        settled = int(np.count_nonzero(right)) - int(np.count_nonzero(right[open_rows]))
        moving = np.count_nonzero(open_positive == truth[open_rows][:, None], axis=0)
        return np.asarray((settled + moving) / len(truth))

    @cached_property
    def _truth_at_full(self) -> tuple[np.ndarray, np.ndarray]:
        """Binomial: each benchmark label as an index into `self.classes` (-1: a class not
        trained on), and whether the full fit's class is right there."""
        truth = self._truth_index
        return truth, (self._bench_at_full[0] > 0.0) == truth

    @cached_property
    def _truth_index(self) -> np.ndarray:
        """The benchmark's labels as indices into `self.classes` (-1: a class not trained on):
        equality is all accuracy asks, with no code per prediction."""
        y_codes, trained, labels, _ = self._label_codes
        index = np.full(labels, -1, dtype=np.intp)
        index[trained] = np.arange(len(trained))
        return np.asarray(index[y_codes])

    @cached_property
    def _bench_at_full(self) -> tuple[np.ndarray, np.ndarray]:
        """The benchmark rows' linear predictor with the full fit, and their features' sizes."""
        return self.x_bench @ self.full_fit[0], np.abs(self.x_bench)

    @cached_property
    def _label_codes(self) -> tuple[np.ndarray, np.ndarray, int, int | None]:
        """Codes of the benchmark's labels and of `self.classes` over the labels of both, their
        number and the benchmark's positive class's code (None without two classes): once,
        not per slice of coalitions (a Python pass over every benchmark row)."""
        y_true = self.scorer.y_true
        # A part's labels may be typed apart from the benchmark's (its file read on its own:
        # "1" beside 1): as in `_predictions`, predicted labels take the benchmark's type.
        classes = np.asarray(self.classes, dtype=object).astype(y_true.dtype).tolist()
        labels = sorted_labels(set(self.scorer.classes) | set(classes))
        code = {label: i for i, label in enumerate(labels)}
        y_codes = _codes(y_true, labels, code)
        trained = np.asarray([code[v] for v in classes], dtype=np.intp)
        bench = self.scorer.classes
        positive = code[bench[-1]] if len(bench) == 2 else None
        return y_codes, trained, len(labels), positive

    def _code_scores(self, predicted: np.ndarray) -> np.ndarray:
        """accuracy or f1 of predicted class indices (into `self.classes`, one column per
        coalition; binomial: booleans), on codes of the labels of the benchmark and the
        training rows."""
        y_codes, trained, labels, positive = self._label_codes
        if self.scorer.metric.name == "accuracy":
            return code_columns("accuracy", self._truth_index, predicted, labels, positive)
        picked = trained[np.asarray(predicted, dtype=np.intp)]
        return code_columns(self.scorer.metric.name, y_codes, picked, labels, positive)


def _codes(values: np.ndarray, labels: list[Any], code: dict[Any, int]) -> np.ndarray:
    """Each value's code (`code`: label -> its index in `labels`, sorted): by a binary search
    when values and labels are plain numbers (a Python lookup per row otherwise, whose
    equality also matches 1 with 1.0 or True)."""
    if values.dtype.kind in "iu" and all(
        isinstance(label, int | np.integer) and not isinstance(label, bool) for label in labels
    ):
        try:
            known = np.asarray(labels, dtype=np.int64)
        except OverflowError:  # a uint64 label of 2^63 or more: looked up below
            known = None
        if known is not None:
            positions = np.minimum(np.searchsorted(known, values), len(known) - 1)
            if np.array_equal(known[positions], values):
                return np.asarray(positions, dtype=np.intp)
    return np.asarray([code[v] for v in values.tolist()], dtype=np.intp)
