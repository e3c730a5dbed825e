"""What the bench's own coalition games share (bench/_tree_surrogate.py, _boosting_replay.py,
_knn_surrogate.py): v(S) is the benchmark metric of `_predictions(S)`, as an improvement over
the accepted rows alone in percent, as the valuation's surrogate game computes it
(`pipeline.rewards.surrogate`), and `prepare` values a round's coalitions one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from pipeline.evaluation.metrics import Predictions, improvement_denominator, metric_samples
from pipeline.evaluation.scorer import BenchmarkScorer, _class_scores


class PredictionGame:
    """A game valued from each coalition's benchmark predictions; a subclass sets `scorer`,
    `higher_is_better` (and `classes` for classification), implements `_predictions`, and
    calls `_start` last in its constructor."""

    scorer: BenchmarkScorer
    higher_is_better: bool
    classes: Sequence[Any]

    def _start(self) -> None:
        """v(∅) = 0, and the score and denominator the improvements are taken against."""
        self._values: dict[frozenset[int], float] = {}
        self.score_without = self._score(frozenset())
        self.denominator = improvement_denominator(self.score_without, self.scorer.floor)
        self._values[frozenset()] = 0.0

    def _predictions(self, coalition: frozenset[int]) -> Predictions:
        raise NotImplementedError

    def _class_predictions(self, proba: np.ndarray) -> Predictions:
        """A classifier's predictions from class probabilities over `classes` (rows x classes):
        the scores themselves for metrics that take them, else the most probable class."""
        name, y_true = self.scorer.metric.name, self.scorer.y_true
        if self.scorer.metric.uses_probabilities:
            scores = _class_scores(self.scorer.classes, self.classes, proba)
            return Predictions(name, y_true, scores, self.scorer.classes)
        labels = np.asarray(self.classes, dtype=object)[proba.argmax(axis=1)]
        return Predictions(name, y_true, labels.astype(y_true.dtype), self.scorer.classes)

    def _score(self, coalition: frozenset[int]) -> float:
        predictions = self._predictions(coalition)
        return float(metric_samples(predictions, np.ones((1, len(predictions.y_true))))[0])

    def prepare(self, coalitions: Iterable[frozenset[int]]) -> None:
        for coalition in coalitions:
            self.value(coalition)

    def value(self, coalition: frozenset[int]) -> float:
        if coalition not in self._values:
            gain = self._score(coalition) - self.score_without
            sign = 1.0 if self.higher_is_better else -1.0
            self._values[coalition] = sign * gain / self.denominator * 100.0
        return self._values[coalition]
