"""The surrogate game that splits a large batch's pool: a linear model on the model's own
features, each coalition fitted in closed form from statistics that add up over contributions.

Training the model's estimator once per coalition costs 2^n − 1 fits for n contributions; on
large accepted data that is hours. The split of the pool instead plays the same game with a
stand-in model whose coalition fits cost a d × d solve (d: feature columns):

- Features are the model's own preprocessing (`pipeline.models.estimators`: imputation,
  scaling, one-hot), fitted once on the accepted rows and the batch.
- Regression: ridge least squares (penalty `RIDGE` on the scaled features, not on the
  intercept). Its sufficient statistics XᵀX and Xᵀy add up over parts, so every coalition's fit
  is exact, not approximated.
- Classification: one L2 logistic regression per benchmark class (one-vs-rest), fitted by
  Newton's method on the accepted rows and the whole batch. A coalition's fit is one Newton
  step from it using each part's gradient and Hessian at that fit, which add up over parts
  (the influence-function estimate of refitting without the missing parts, with its
  curvature).
- Accepted rows beyond `max_base_rows` are replaced by a sample, stratified by class, whose
  rows carry the weight of the rows they stand for, so the accepted data keeps its mass against
  the batch; the sample is seeded.

The game's value is the benchmark metric of the surrogate's predictions, as an improvement over
the surrogate trained on the accepted rows alone. Only the *proportions* of its Shapley values
are used: `pipeline.rewards.valuation` scales them to the pool the real model measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline.evaluation.metrics import Predictions, improvement_denominator, metric_samples
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import Recipe, build_estimator, check_estimator

RIDGE = 1.0
SAMPLE_SEED = 11
NEWTON_STEPS = 25
NEWTON_TOLERANCE = 1e-8


@dataclass(frozen=True)
class _Part:
    """One part of the training data (the accepted rows or a player) as the surrogate sees it."""

    x: np.ndarray  # rows x features, with an intercept column
    y: np.ndarray  # rows x targets (regression: 1; classification: one-hot per class)
    weight: np.ndarray  # per row


def stratified_sample(
    frame: pd.DataFrame, target: str, limit: int, stratify: bool, seed: int = SAMPLE_SEED
) -> tuple[pd.DataFrame, float]:
    """At most about `limit` rows of `frame` (each class sampled at the same rate when
    `stratify`) and the weight each sampled row carries."""
    if len(frame) <= limit:
        return frame, 1.0
    share = limit / len(frame)
    if stratify and target in frame.columns:
        sample = frame.groupby(target, dropna=False, group_keys=False).sample(
            frac=share, random_state=seed
        )
    else:
        sample = frame.sample(n=limit, random_state=seed)
    return sample, len(frame) / max(len(sample), 1)


class SurrogateGame:
    """v(S) of the surrogate for coalitions of `frames` on top of `base` (module docstring)."""

    def __init__(
        self,
        scorer: BenchmarkScorer,
        base: pd.DataFrame,
        frames: Sequence[pd.DataFrame],
        *,
        max_base_rows: int,
        higher_is_better: bool,
    ) -> None:
        self.scorer = scorer
        self.higher_is_better = higher_is_better
        classification = scorer.task_type == "classification"
        labelled = [scorer.labelled(f) for f in (base, *frames)]
        sample, weight = stratified_sample(
            labelled[0], scorer.target_column, max_base_rows, classification
        )
        self.sample_rows = len(sample)
        parts_frames = [sample, *labelled[1:]]
        train = pd.concat([p for p in parts_frames if len(p)], ignore_index=True)
        columns = scorer.feature_columns(train)
        # The model's own preprocessing; a model with the owner's training code has none the
        # marketplace knows, so the surrogate uses the label check's (CHECK_ESTIMATORS).
        recipe = scorer.recipe or Recipe(check_estimator(scorer.task_type, None))
        features = build_estimator(recipe, scorer.task_type)["features"]

        def matrix(transformed: object) -> np.ndarray:
            dense = np.asarray(_dense(transformed), dtype="float64")
            return np.hstack([dense, np.ones((len(dense), 1))])

        # One transform of all the rows (a part may lack a column: missing, imputed), cut into
        # the parts: the preprocessing's cost is per call as much as per row.
        x_train = matrix(features.fit_transform(train.reindex(columns=columns)))
        self.x_bench = matrix(features.transform(scorer.bench.reindex(columns=columns)))
        ends = np.cumsum([len(p) for p in parts_frames])
        self.parts = [
            _Part(
                x_train[end - len(p) : end],
                self._targets(p),
                np.full(len(p), weight if i == 0 else 1.0),
            )
            for i, (p, end) in enumerate(zip(parts_frames, ends, strict=True))
        ]
        dims = self.x_bench.shape[1]
        self.penalty = RIDGE * np.eye(dims)
        self.penalty[-1, -1] = 0.0  # the intercept is not penalised
        self.classification = classification
        self._prepare_statistics()
        self.score_without = _score(self._predictions(frozenset()))
        self.denominator = improvement_denominator(self.score_without, scorer.floor)
        self._values: dict[frozenset[int], float] = {frozenset(): 0.0}

    def _targets(self, frame: pd.DataFrame) -> np.ndarray:
        y = frame[self.scorer.target_column].to_numpy()
        if self.scorer.task_type == "regression":
            return np.asarray(y.astype("float64").reshape(-1, 1))
        classes = np.asarray(self.scorer.classes, dtype=object)
        return np.asarray(y.astype(object)[:, None] == classes[None, :], dtype="float64")

    def _prepare_statistics(self) -> None:
        """Each part's statistics: XᵀWX and XᵀWy (regression), or its Hessian and gradient per
        class at the logistic fit on every part (classification)."""
        if not self.classification:
            self.hessians = np.stack([(p.x * p.weight[:, None]).T @ p.x for p in self.parts])
            self.gradients = np.stack([(p.x * p.weight[:, None]).T @ p.y for p in self.parts])
            return
        self.full_fit = self._logistic_fit()
        hessians, gradients = [], []
        for p in self.parts:
            prob = _sigmoid(p.x @ self.full_fit)  # rows x classes
            curvature = prob * (1 - prob) * p.weight[:, None]
            hessians.append(np.einsum("ri,rc,rj->cij", p.x, curvature, p.x))
            gradients.append(p.x.T @ ((p.y - prob) * p.weight[:, None]))
        self.hessians = np.stack(hessians)  # parts x classes x d x d
        self.gradients = np.stack(gradients)  # parts x d x classes

    def _logistic_fit(self) -> np.ndarray:
        """L2 logistic regression per class on every part, by Newton's method."""
        x = np.vstack([p.x for p in self.parts])
        y = np.vstack([p.y for p in self.parts])
        w = np.concatenate([p.weight for p in self.parts])
        beta = np.zeros((x.shape[1], y.shape[1]))
        for _ in range(NEWTON_STEPS):
            prob = _sigmoid(x @ beta)
            gradient = x.T @ ((y - prob) * w[:, None]) - self.penalty @ beta
            curvature = prob * (1 - prob) * w[:, None]
            step = np.stack(
                [
                    _solve((x * curvature[:, [c]]).T @ x + self.penalty, gradient[:, c])
                    for c in range(y.shape[1])
                ],
                axis=1,
            )
            beta += step
            if float(np.max(np.abs(step))) < NEWTON_TOLERANCE:
                break
        return np.asarray(beta)

    def _coefficients(self, coalition: frozenset[int]) -> np.ndarray:
        members = [0, *(i + 1 for i in sorted(coalition))]
        hessian = self.hessians[members].sum(axis=0)
        gradient = self.gradients[members].sum(axis=0)
        if not self.classification:
            return np.asarray(_solve(hessian + self.penalty, gradient))
        # One Newton step from the fit on every part, towards the fit on `members`.
        gradient = gradient - self.penalty @ self.full_fit
        steps = [_solve(hessian[c] + self.penalty, gradient[:, c]) for c in range(len(hessian))]
        return np.asarray(self.full_fit + np.stack(steps, axis=1))

    def _predictions(self, coalition: frozenset[int]) -> Predictions:
        if not any(len(self.parts[i].x) for i in (0, *(j + 1 for j in coalition))):
            # No training row: the model's own trivial baseline (`pipeline.evaluation.scorer`).
            return self.scorer.predict(pd.DataFrame())
        outputs = self.x_bench @ self._coefficients(coalition)
        name, y_true = self.scorer.metric.name, self.scorer.y_true
        if not self.classification:
            return Predictions(name, y_true, outputs[:, 0])
        classes = self.scorer.classes
        scores = _sigmoid(outputs)
        totals = scores.sum(axis=1, keepdims=True)
        scores = np.where(totals > 0, scores / np.where(totals > 0, totals, 1.0), 1 / len(classes))
        if self.scorer.metric.uses_probabilities:
            return Predictions(name, y_true, scores, classes)
        labels = np.asarray(classes, dtype=object)[scores.argmax(axis=1)]
        return Predictions(name, y_true, labels.astype(y_true.dtype), classes)

    def value(self, coalition: frozenset[int]) -> float:
        """The surrogate's improvement with `coalition`, in percent (v(∅) = 0)."""
        if coalition not in self._values:
            gain = _score(self._predictions(coalition)) - self.score_without
            sign = 1.0 if self.higher_is_better else -1.0
            self._values[coalition] = sign * gain / self.denominator * 100.0
        return self._values[coalition]


def _score(predictions: Predictions) -> float:
    """The metric over every benchmark row, vectorised (`metric_samples` with unit weights
    equals `metric_score`, tested), without scikit-learn's per-call validation."""
    return float(metric_samples(predictions, np.ones((1, len(predictions.y_true))))[0])


def _dense(matrix: object) -> object:
    to_array = getattr(matrix, "toarray", None)
    return to_array() if to_array is not None else matrix


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)))


def _solve(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    try:
        return np.asarray(np.linalg.solve(matrix, rhs))
    except np.linalg.LinAlgError:
        return np.asarray(np.linalg.lstsq(matrix, rhs, rcond=None)[0])
