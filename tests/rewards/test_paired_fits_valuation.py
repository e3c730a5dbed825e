"""A batch valued with the owner's paired fits (issue 35): the game is played on the K fits'
stacked predictions (the expected game at small K) and keeps issue 9's properties; the pool
comes with its band over the K fits. Small real data (scikit-learn's breast cancer set) and a
real HistGradientBoosting model."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from pipeline.evaluation.metrics import copy_scores, improvement_denominator, metric_score
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import Recipe
from pipeline.rewards.valuation import (
    EXACT,
    SHARE_REJECTED,
    SURROGATE_EXACT,
    BatchValuation,
    Player,
    ValuationSettings,
    value_batch,
)
from tests.support.valuation import CANCER

BENCH, REST = CANCER.iloc[:150], CANCER.iloc[150:].reset_index(drop=True)
BASE = REST.iloc[:20]
# A real HistGradientBoosting model, kept small so that each test trains in seconds.
HGB = Recipe("hist_gradient_boosting_classifier", {"max_iter": 20})
FAST = ValuationSettings(resamples=200)


def _scorer(fits: int, estimator: str | Recipe = HGB) -> BenchmarkScorer:
    return BenchmarkScorer(
        BENCH,
        task_type="classification",
        estimator=estimator,
        target_column="target",
        metric_name="accuracy",
        paired_fits=fits,
    )


def _players() -> list[Player]:
    good_a, good_b, flipped = (REST.iloc[60 + 70 * i : 130 + 70 * i] for i in range(3))
    return [
        Player("a", good_a.reset_index(drop=True)),
        Player("b", good_b.reset_index(drop=True)),
        Player("flipped", flipped.assign(target=1 - flipped.target).reset_index(drop=True)),
    ]


def _value(scorer: BenchmarkScorer, players: list[Player], **settings: Any) -> BatchValuation:
    return value_batch(
        scorer,
        BASE,
        players,
        higher_is_better=True,
        settings=ValuationSettings(resamples=200, **settings),
    )


def test_paired_fits_keep_the_shares_properties_and_give_the_pool_its_band() -> None:
    result = _value(_scorer(4), _players())
    assert result.method == EXACT
    assert result.rejected == {"flipped": SHARE_REJECTED}
    assert sorted(result.accepted) == ["a", "b"] and result.significant
    assert math.fsum(result.shares[k] for k in result.accepted) == pytest.approx(result.pool_pct)
    # The game's predictions are the 4 fits', "with" and "without" alike.
    assert result.with_predictions is not None and result.without is not None
    assert result.with_predictions.copies == result.without.copies == 4
    # The band: the 4 fits' own pools, against the pool's denominator; accuracy is a mean
    # over rows, so the pool is their mean and lies inside the band.
    band = result.stability
    assert band is not None and band.fits == 4
    assert band.low <= result.pool_pct <= band.high and band.low < band.high
    assert (band.low + band.high) / 2 == pytest.approx(result.pool_pct)  # centred on the pool
    denominator = improvement_denominator(metric_score(result.without), 0.5)
    pools = (copy_scores(result.with_predictions) - copy_scores(result.without)) / denominator * 100
    assert float(np.mean(pools)) == pytest.approx(result.pool_pct)


def test_one_fit_has_no_band_and_a_rejected_batch_none() -> None:
    one = _value(_scorer(1, "logistic_regression"), _players()[:2])
    assert one.stability is None and one.with_predictions is not None
    assert one.with_predictions.copies == 1
    flipped = _value(_scorer(2, "logistic_regression"), _players()[2:])
    assert not flipped.accepted and flipped.stability is None


def test_the_surrogate_splits_and_the_paired_fits_measure_the_pool() -> None:
    """Beyond the row budget the surrogate splits the pool; the pool and its band are the
    estimator's paired fits'."""
    result = _value(_scorer(3), _players()[:2], coalition_row_budget=0)
    assert result.method == SURROGATE_EXACT
    assert result.with_predictions is not None and result.with_predictions.copies == 3
    assert math.fsum(result.shares[k] for k in result.accepted) == pytest.approx(result.pool_pct)
    assert result.stability is not None and result.stability.fits == 3
    assert result.stability.low <= result.pool_pct <= result.stability.high


def test_a_cached_without_of_the_same_fits_gives_the_same_valuation() -> None:
    scorer = _scorer(4)
    first = _value(scorer, _players()[:2])
    assert first.without is not None
    again = value_batch(
        scorer,
        BASE,
        _players()[:2],
        higher_is_better=True,
        settings=FAST,
        without=first.without,
    )
    assert again.coalitions == first.coalitions - 1
    assert again.shares == first.shares and again.stability == first.stability
    assert again.interval == first.interval


def test_the_row_budget_counts_one_fit_so_paired_fits_keep_the_models_own_split() -> None:
    """The row budget bounds one fit's coalitions: with K paired fits a batch the estimator
    splits with one fit is still split by the estimator (K times the fits, as everywhere), not
    handed to the surrogate's linear split; past the budget both go to the surrogate."""
    players = _players()[:2]
    rows = sum(len(BASE) + sum(p.rows for p in s) for s in ([players[0]], [players[1]], players))
    for fits in (1, 4):
        scorer = _scorer(fits, "logistic_regression")
        assert _value(scorer, players, coalition_row_budget=rows).method == EXACT, fits
        assert _value(scorer, players, coalition_row_budget=rows // 2).method == SURROGATE_EXACT
