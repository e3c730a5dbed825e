"""The surrogate game that splits a large batch's pool: a linear model on the model's own
features, each coalition fitted from statistics of its parts, no model trained per coalition.

Training the model's estimator once per coalition costs 2^n − 1 fits for n contributions; on
large accepted data that is hours. The split of the pool instead plays the same game with a
linear model whose coalition fits cost d × d solves (d: feature columns):

- Features are the model's own preprocessing (`pipeline.models.estimators`: imputation,
  scaling, one-hot), fitted once on the accepted rows and the batch, computed in bulk where it
  can be (`pipeline.models.bulk_preprocessing`: the same features); each coalition's fit
  accounts for the scaling the estimator would have fitted on that coalition's rows
  (`pipeline.rewards.surrogate_fits`).
- When the model's estimator is linear (linear regression, ridge, logistic regression) the
  surrogate minimises that estimator's own objective with its own parameters (penalty, binomial
  or multinomial) to convergence, so each coalition's fit is the estimator's fit and the game is
  the estimator's game (up to the solvers' tolerances, and imputation medians taken over all
  rows). Otherwise (forests, boosting, neighbours, the owner's code) it is a stand-in: L2
  logistic or ridge regression at `STAND_IN_PENALTY` (other features for trees, binned numeric
  columns, were measured and not closer: docs/valuation-scale.md §5). The bench plays the
  stand-in through `_objective`; `_preprocessing` and `_scaled` are where the binned features
  were tried (their code is in git, docs/benchmarks.md).
- Accepted rows beyond `max_base_rows` are replaced by a sample, stratified by class, whose
  rows carry the weight of the rows they stand for, so the accepted data keeps its mass against
  the batch; which rows are kept depends on their content, not their positions
  (`stratified_sample`).

The game's value is the benchmark metric of the surrogate's predictions, as an improvement over
the surrogate trained on the accepted rows alone. Only the *proportions* of its Shapley values
are used: `pipeline.rewards.valuation` scales them to the pool the real model measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from pipeline.evaluation.metrics import (
    Predictions,
    improvement_denominator,
    metric_samples,
    sorted_labels,
)
from pipeline.evaluation.scorer import BenchmarkScorer, _class_scores
from pipeline.models.bulk_preprocessing import BulkFeatures, bulk_features
from pipeline.models.estimators import Recipe, build_estimator, check_estimator
from pipeline.models.row_keys import keyed_uniform, row_keys
from pipeline.rewards.logistic_parts import LogisticPart
from pipeline.rewards.surrogate_fits import (
    AtFullFit,
    Moments,
    anchor_fit,
    coalition_fits,
    coalition_penalties,
    coalition_penalty,
    least_squares,
    logistic_fit,
    part_hessians,
    probabilities,
)
from pipeline.rewards.surrogate_objective import Objective, objective_for
from pipeline.rewards.surrogate_values import BulkValues

SAMPLE_SEED = 11


@dataclass(frozen=True)
class _Part:
    """One part of the training data (the accepted rows or a player) as the surrogate sees it."""

    x: np.ndarray  # rows x features, with an intercept column last
    y: np.ndarray  # targets (regression) or labels (classification)
    weight: np.ndarray  # per row
    frame: pd.DataFrame


def stratified_sample(
    frame: pd.DataFrame, target: str, limit: int, stratify: bool, seed: int = SAMPLE_SEED
) -> tuple[pd.DataFrame, float]:
    """At most about `limit` rows of `frame` (each class sampled at the same rate when
    `stratify`) and the weight each sampled row carries.

    The rows kept are those of smallest `keyed_uniform` draw of their content
    (`pipeline.models.row_keys`), as many of each class as the rate gives, in that order: a
    row's chance to be kept is its own, so one row more or fewer changes the sample by at
    most that row and the one at the cut, and the stored order changes nothing."""
    if len(frame) <= limit:
        return frame, 1.0
    share = limit / len(frame)
    draws = keyed_uniform(row_keys(frame), seed)
    if stratify and target in frame.columns:
        codes = pd.factorize(frame[target], use_na_sentinel=False)[0]
    else:
        codes = np.zeros(len(frame), dtype=np.int64)
    kept: list[np.ndarray] = []
    for code in np.unique(codes):
        members = np.flatnonzero(codes == code)
        take = round(share * len(members)) if len(np.unique(codes)) > 1 else limit
        kept.append(members[np.argsort(draws[members], kind="stable")[:take]])
    chosen = np.concatenate(kept)
    chosen = chosen[np.argsort(draws[chosen], kind="stable")]
    return frame.iloc[chosen], len(frame) / max(len(chosen), 1)


def sampled_parts(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    frames: Sequence[pd.DataFrame],
    max_base_rows: int,
) -> tuple[list[pd.DataFrame], float]:
    """A game's labelled parts, the accepted rows' sample (`stratified_sample`) first and each
    contribution after, and the weight each sampled accepted row carries."""
    labelled = [scorer.labelled(f) for f in (base, *frames)]
    classification = scorer.task_type == "classification"
    sample, weight = stratified_sample(
        labelled[0], scorer.target_column, max_base_rows, classification
    )
    return [sample, *labelled[1:]], weight


class SurrogateGame(BulkValues):
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
        self.classification = scorer.task_type == "classification"
        parts, weight = sampled_parts(scorer, base, frames, max_base_rows)
        self.sample_rows = len(parts[0])
        self.objective = self._objective()
        self._transform(parts, weight)
        self._fits: dict[frozenset[int], Any] = {}
        self._member_lists: dict[frozenset[int], list[int]] = {}
        self._prepare_statistics()
        # v(∅) = 0 first: "without" is scored apart, never in bulk (`_bulk_values`).
        self._values: dict[frozenset[int], float] = {frozenset(): 0.0}

    @cached_property
    def score_without(self) -> float:
        """The surrogate's score on the accepted rows alone (fitted with the first round)."""
        return _score(self._predictions(frozenset()))

    @cached_property
    def denominator(self) -> float:
        return improvement_denominator(self.score_without, self.scorer.floor)

    def _transform(self, parts_frames: list[pd.DataFrame], weight: float) -> None:
        """The parts as rows of the model's own preprocessing, fitted once on all of them."""
        train = pd.concat([p for p in parts_frames if len(p)], ignore_index=True)
        x_train, self.x_bench, self.scaled = self._features(train)
        ends = np.cumsum([len(p) for p in parts_frames])
        target = self.scorer.target_column
        self.parts = [
            _Part(
                x_train[end - len(p) : end],
                p[target].to_numpy(),
                np.full(len(p), weight if i == 0 else 1.0),
                p,
            )
            for i, (p, end) in enumerate(zip(parts_frames, ends, strict=True))
        ]
        self.moments = [Moments.of(p.x, p.weight) for p in self.parts]
        self._has_rows = [len(p.x) > 0 for p in self.parts]

    def _objective(self) -> Objective:
        """The penalised loss of the coalitions' fits (`objective_for`)."""
        return objective_for(self.scorer.recipe, self.scorer.task_type)

    def _preprocessing(self, recipe: Recipe) -> Any:
        """The unfitted feature transform: the model's own preprocessing."""
        return build_estimator(recipe, self.scorer.task_type)["features"]

    def _scaled(self, features: Any, width: int) -> np.ndarray:
        """Which of the fitted transform's `width` columns the model standardises."""
        scaled = np.zeros(width, dtype=bool)
        scaled[features.output_indices_.get("numeric", slice(0, 0))] = True
        return scaled

    def _bulk(
        self, train: pd.DataFrame, bench: pd.DataFrame, recipe: Recipe
    ) -> BulkFeatures | None:
        """`_preprocessing`'s output computed in bulk, where it allows (None: it does not);
        a game on other features than the model's own has none."""
        return bulk_features(train, [bench], recipe.preprocessing.text_columns, ones=True)

    def _features(self, train: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The training rows' and the benchmark's features with an intercept column last, and
        which columns are standardised: computed in bulk (`pipeline.models.bulk_preprocessing`)
        where the preprocessing allows, by scikit-learn's pipeline otherwise."""
        columns = self.scorer.feature_columns(train)
        # The model's own preprocessing; a model with the owner's training code has none the
        # marketplace knows, so the surrogate uses the label check's (CHECK_ESTIMATORS).
        recipe = self.scorer.recipe or Recipe(check_estimator(self.scorer.task_type, None))
        train, bench = train.reindex(columns=columns), self.scorer.bench.reindex(columns=columns)
        bulk = self._bulk(train, bench, recipe)
        if bulk is not None:  # its matrices with the column of ones
            return bulk.fitted, bulk.others[0], np.append(bulk.scaled, False)
        features = self._preprocessing(recipe)
        # One transform of all the rows (a part may lack a column: missing, imputed), cut into
        # the parts: the preprocessing's cost is per call as much as per row.
        x_train = np.asarray(_dense(features.fit_transform(train)), dtype="float64")
        x_bench = np.asarray(_dense(features.transform(bench)), dtype="float64")
        scaled = self._scaled(features, x_train.shape[1])
        ones = np.ones((1, 1))
        return (
            np.hstack([x_train, np.broadcast_to(ones, (len(x_train), 1))]),
            np.hstack([x_bench, np.broadcast_to(ones, (len(x_bench), 1))]),
            np.append(scaled, False),
        )

    def _members(self, coalition: frozenset[int]) -> list[int]:
        """The parts with rows a coalition trains on (the accepted rows are part 0); asked
        several times per coalition, computed once."""
        if coalition not in self._member_lists:
            parts = (0, *(j + 1 for j in sorted(coalition)))
            self._member_lists[coalition] = [i for i in parts if self._has_rows[i]]
        return self._member_lists[coalition]

    def _penalty(self, members: Sequence[int]) -> np.ndarray:
        moments = [self.moments[i] for i in members]
        return coalition_penalty(moments, self.scaled, self.objective.penalty)

    def _prepare_statistics(self) -> None:
        """Regression: each part's XᵀWX and XᵀWy. Classification: the classes, the fit on
        every part and each part's Hessian there."""
        if not self.classification:
            self.grams = [(p.x * p.weight[:, None]).T @ p.x for p in self.parts]
            self.moments_y = [p.x.T @ (p.weight * p.y.astype("float64")) for p in self.parts]
            return
        self.part_classes = [_label_set(p.y) for p in self.parts]
        self.classes = sorted_labels(set().union(*self.part_classes))
        self._every_class = set(self.classes)
        every = list(range(len(self.parts)))
        if len(self.classes) < 2:
            return
        self.logistic = self._logistic_parts(self.classes, every)
        used = [i for i in every if len(self.parts[i].x)]
        every_part = [self.logistic[i] for i in used]
        self.full_fit = anchor_fit(every_part, self._penalty(used))
        # The parts' linear predictors at the full fit: its Hessians here, and later the
        # coalitions' start (`_at_full`), take them, one product each.
        self._full_etas = [part.x @ self.full_fit.T for part in self.logistic]
        self.hessians = part_hessians(self.logistic, self._full_etas)

    @cached_property
    def _at_full(self) -> AtFullFit:
        """Each round's coalition fits start from the same full fit: what they need of it."""
        return AtFullFit.of(self.logistic, self.full_fit, self.hessians, self._full_etas)

    def _logistic_parts(self, classes: Sequence[Any], members: Iterable[int]) -> list[LogisticPart]:
        """The parts with one-hot labels over `classes` (binomial: the second class only)."""
        labels = np.asarray(classes, dtype=object)
        columns = labels[1:] if len(labels) == 2 else labels
        numbers = _integer_labels(columns.tolist())
        result = []
        for i in members:
            p = self.parts[i]
            if numbers is not None and p.y.dtype.kind in "iu":  # compared as integers: the same
                y = np.asarray(p.y[:, None] == numbers[None, :], dtype="float64")
            else:  # Python's equality, as the classes were gathered (1 == 1.0 == True)
                y = np.asarray(p.y.astype(object)[:, None] == columns[None, :], dtype="float64")
            result.append(LogisticPart(p.x, y, p.weight))
        return result

    def prepare(self, coalitions: Iterable[frozenset[int]]) -> None:
        """Fit every coalition not fitted yet, at once (classification's fits are vectorised)."""
        missing = [c for c in dict.fromkeys(coalitions) if c not in self._fits]
        if frozenset() not in self._fits and self._members(frozenset()):
            missing.insert(0, frozenset())  # "without", fitted with the first round's chords
        if not self.classification:
            for c in missing:
                members = self._members(c)
                gram = sum(self.grams[i] for i in members)
                moment = sum(self.moments_y[i] for i in members)
                self._fits[c] = (None, least_squares(gram, moment, self._penalty(members)))
            self._bulk_values(missing)
            return
        chords: list[frozenset[int]] = []
        for c in missing:
            members = self._members(c)
            present = self._present(members)
            if len(present) < 2:
                self._fits[c] = None  # nothing to fit: the scorer's trivial baseline
            elif len(present) < len(self.classes):
                parts = self._logistic_parts(present, members)
                self._fits[c] = (present, logistic_fit(parts, self._penalty(members)))
            else:
                chords.append(c)
        if chords:
            members_list = [self._members(c) for c in chords]
            membership = np.zeros((len(chords), len(self.parts)))
            for row, members in enumerate(members_list):
                membership[row, members] = 1.0
            pens = coalition_penalties(
                self.moments, membership, self.scaled, self.objective.penalty
            )
            fits = coalition_fits(
                self.logistic, self.full_fit, self.hessians, members_list, pens, self._at_full
            )
            self._fits.update({c: (self.classes, b) for c, b in zip(chords, fits, strict=True)})
        self._bulk_values(missing)

    def _present(self, members: Sequence[int]) -> list[Any]:
        """The classes of the parts `members`: every class when one of them holds every class
        (the accepted rows, as a rule), without a union of label sets per coalition."""
        if any(self.part_classes[i] >= self._every_class for i in members):
            return list(self.classes)
        return sorted_labels(set().union(*(self.part_classes[i] for i in members)))

    def _predictions(self, coalition: frozenset[int]) -> Predictions:
        members = self._members(coalition)
        if coalition not in self._fits and members:
            self.prepare([coalition])
        fit = self._fits.get(coalition) if members else None
        if fit is None:
            # No row, or one class: the model's own trivial baseline (`pipeline.evaluation.scorer`).
            frames = [self.parts[i].frame for i in members]
            return self.scorer.predict(pd.concat(frames) if frames else pd.DataFrame())
        classes, beta = fit
        name, y_true = self.scorer.metric.name, self.scorer.y_true
        if not self.classification:
            return Predictions(name, y_true, self.x_bench @ beta)
        eta = self.x_bench @ beta.T
        if self.scorer.metric.uses_probabilities:
            proba = probabilities(eta)
            if proba.shape[1] == 1:
                proba = np.hstack([1.0 - proba, proba])
            scores = _class_scores(self.scorer.classes, classes, proba)
            return Predictions(name, y_true, scores, self.scorer.classes)
        # As `_chunk_scores`: the class of the largest linear predictor (binomial: η > 0).
        picked = eta[:, 0] > 0.0 if eta.shape[1] == 1 else eta.argmax(axis=1)
        labels = np.asarray(classes, dtype=object)[np.asarray(picked, dtype=np.intp)]
        return Predictions(name, y_true, labels.astype(y_true.dtype), self.scorer.classes)

    def value(self, coalition: frozenset[int]) -> float:
        """The surrogate's improvement with `coalition`, in percent (v(∅) = 0)."""
        if coalition not in self._values:
            self._values[coalition] = self._improvement(_score(self._predictions(coalition)))
        return self._values[coalition]

    def _improvement(self, score: float) -> float:
        gain = score - self.score_without
        sign = 1.0 if self.higher_is_better else -1.0
        return sign * gain / self.denominator * 100.0


def _label_set(labels: np.ndarray) -> set[Any]:
    """The distinct labels of a part, as Python values (integers by a sort, not per row)."""
    if labels.dtype.kind in "iu":
        return set(np.unique(labels).tolist())
    return set(labels.tolist())


def _integer_labels(labels: list[Any]) -> np.ndarray | None:
    """`labels` as an integer array when every one is an int64 integer (not a bool), else
    None (a uint64 label of 2^63 or more is looked up as any other value)."""
    if labels and all(
        isinstance(label, int | np.integer) and not isinstance(label, bool) for label in labels
    ):
        try:
            return np.asarray(labels, dtype=np.int64)
        except OverflowError:
            return None
    return None


def _score(predictions: Predictions) -> float:
    """The metric over every benchmark row, vectorised (`metric_samples` with unit weights
    equals `metric_score`, tested), without scikit-learn's per-call validation."""
    return float(metric_samples(predictions, np.ones((1, len(predictions.y_true))))[0])


def _dense(matrix: object) -> object:
    to_array = getattr(matrix, "toarray", None)
    return to_array() if to_array is not None else matrix
