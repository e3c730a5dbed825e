"""Issue 35: what is random in an evaluation depends on the rows, not on their positions or
count. Reordering the accepted rows changes nothing; one accepted row fewer changes the
surrogate's sample by that row (and the one at the cut) and moves a forest's payout little.
Small real data (scikit-learn's breast cancer set)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models import estimators
from pipeline.models.estimators import Recipe, build_estimator
from pipeline.models.row_keys import poisson_counts, row_keys
from pipeline.rewards.surrogate import stratified_sample
from pipeline.rewards.valuation import Player, ValuationSettings, value_batch
from tests.support.valuation import CANCER, shuffled

BENCH, REST = CANCER.iloc[:169], CANCER.iloc[169:].reset_index(drop=True)
EXACT_GAME = ValuationSettings(resamples=200)


def _scorer(estimator: str) -> BenchmarkScorer:
    return BenchmarkScorer(
        BENCH,
        task_type="classification",
        estimator=estimator,
        target_column="target",
        metric_name="roc_auc",
    )


def _probabilities(estimator: str, train: pd.DataFrame) -> np.ndarray:
    return np.asarray(_scorer(estimator).predict(train).outputs)


@pytest.mark.parametrize(
    "estimator", ["random_forest_classifier", "hist_gradient_boosting_classifier"]
)
def test_reordered_training_rows_give_the_same_model(estimator: str) -> None:
    """sklearn's forest draws its bootstrap by position: the same rows in another order used
    to give another forest."""
    train = REST.iloc[:250]
    first = _probabilities(estimator, train)
    again = _probabilities(estimator, shuffled(train, seed=7))
    assert np.array_equal(first, again)


def test_one_row_fewer_changes_only_that_rows_bootstrap_draws() -> None:
    keys = row_keys(REST)
    without = np.delete(keys, 5)
    for tree_seed in (0, 1, 12345):
        counts = poisson_counts(keys, tree_seed)
        assert np.array_equal(np.delete(counts, 5), poisson_counts(without, tree_seed))
        assert counts.mean() == pytest.approx(1.0, abs=0.15)


def test_a_forest_with_row_keys_draws_its_bootstrap_from_them() -> None:
    """Each tree weighs a row by the Poisson count of the row's key: a row left out changes
    no other row's weight, so the forest's predictions move far less than sklearn's, whose
    positional draws replace most of every tree's bootstrap."""
    train = REST.iloc[:300]
    x, y = train.drop(columns="target"), train.target.to_numpy()
    fewer = train.drop(index=train.index[17])

    def proba(frame: pd.DataFrame, keyed: bool) -> np.ndarray:
        model = build_estimator("random_forest_classifier", "classification")
        params = {"model__row_keys": row_keys(frame)} if keyed else {}
        model.fit(frame.drop(columns="target"), frame.target.to_numpy(), **params)
        return np.asarray(model.predict_proba(BENCH.drop(columns="target"))[:, 1])

    keyed_move = np.abs(proba(train, True) - proba(fewer, True)).mean()
    positional_move = np.abs(proba(train, False) - proba(fewer, False)).mean()
    assert keyed_move < positional_move / 2
    model = build_estimator("random_forest_classifier", "classification")
    model.fit(x, y, model__row_keys=row_keys(train))
    assert model["model"].bootstrap and all(
        t._bootstrap_keys is None for t in model["model"].estimators_
    )


def test_the_accepted_sample_is_a_function_of_the_rows() -> None:
    """Reordered rows: the same sample. One row fewer: the sample loses at most that row and
    the row at the cut of its class (drawn by position, about half the sample was replaced)."""
    sample, weight = stratified_sample(REST, "target", 100, stratify=True)
    reordered, _ = stratified_sample(shuffled(REST, seed=3), "target", 100, stratify=True)
    assert sorted(map(tuple, sample.to_numpy())) == sorted(map(tuple, reordered.to_numpy()))
    assert weight * len(sample) == pytest.approx(len(REST))
    for dropped in (0, int(sample.index[0]), 250):
        fewer, _ = stratified_sample(REST.drop(index=dropped), "target", 100, stratify=True)
        before, after = set(sample.index) - {dropped}, set(fewer.index)
        assert len(before ^ after) <= 2


def test_one_accepted_row_fewer_moves_a_forests_payout_less_than_positional_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch of two contributions on 30 accepted rows, valued exactly with a forest; again
    with the rows reordered (nothing moves) and without one accepted row (every other row):
    the largest move of a share, its median over the draws, is under half of what sklearn's
    positional bootstrap gives on the same rows. The median: a row that reaches many trees'
    splits moves a keyed forest too, and one such draw would decide a mean."""
    base = REST.iloc[:30]
    players = [Player(k, REST.iloc[30 + 50 * i : 80 + 50 * i]) for i, k in enumerate("ab")]
    scorer = _scorer("random_forest_classifier")

    def shares(accepted: pd.DataFrame) -> np.ndarray:
        found = value_batch(scorer, accepted, players, higher_is_better=True, settings=EXACT_GAME)
        return np.array([found.shares.get(k, 0.0) for k in "ab"])

    def mean_move() -> float:
        first = shares(base)
        pool = float(np.clip(first, 0, None).sum())
        assert pool > 0
        moves = [
            np.abs(shares(base.drop(index=base.index[d])) - first).max() for d in range(0, 30, 2)
        ]
        return float(np.median(moves)) / pool

    first = shares(base)
    assert np.array_equal(shares(shuffled(base, seed=5)), first)
    keyed = mean_move()
    kind = estimators.CATALOG["random_forest_classifier"]
    monkeypatch.setitem(
        estimators.CATALOG, "random_forest_classifier", dataclasses.replace(kind, keyed=False)
    )
    assert keyed < 0.5 * mean_move()


def test_a_keyed_forest_keeps_the_owners_parameters_and_their_rate() -> None:
    """`max_samples` is the Poisson rate of the keyed draws (sklearn refuses it without its own
    bootstrap, which the keyed fit turns off for the trees), and the forest's parameters are
    the owner's again after the fit (a pickled model holds no keys)."""
    frame = REST.iloc[:200]
    recipe = Recipe("random_forest_regressor", {"max_samples": 0.5, "n_estimators": 20})
    model = build_estimator(recipe, "regression")
    model.fit(
        frame.drop(columns="target"), frame.target.to_numpy(), model__row_keys=row_keys(frame)
    )
    forest = model["model"]
    assert forest.get_params()["max_samples"] == 0.5 and forest.bootstrap
    assert np.isfinite(model.predict(BENCH.drop(columns="target"))).all()
    assert poisson_counts(row_keys(REST), 3, 0.5).mean() == pytest.approx(0.5, abs=0.1)


@pytest.mark.parametrize("rows", [1, 3, 5])
def test_a_forest_fits_a_frame_so_small_that_a_tree_draws_no_row(rows: int) -> None:
    """With a handful of rows some of a forest's 100 trees draw no row at all (e^-n each):
    those trees see every row once, and the forest fits instead of failing the evaluation."""
    train = REST.iloc[:rows].assign(target=[i % 2 for i in range(rows)])
    predictions = _scorer("random_forest_classifier").predict(train)
    assert predictions.outputs.shape == (len(BENCH), 2)
