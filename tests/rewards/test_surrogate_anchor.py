"""The coalitions' anchor (the logistic fit on every part) on data with a rare class: the rows
its first Newton steps sample may miss that class, and a start that bad must not take the fit
(nor the valuation) with it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.demo.churn_data import churn_rows
from pipeline.rewards import surrogate_fits
from pipeline.rewards.logistic_parts import LogisticPart
from pipeline.rewards.surrogate import SurrogateGame
from pipeline.rewards.surrogate_fits import coalition_fits, logistic_fit
from tests.support.valuation import churn_scorer

COALITIONS = [frozenset({0}), frozenset({0, 1}), frozenset({1, 2}), frozenset({0, 1, 2, 3})]


def _rare_positives_game() -> SurrogateGame:
    """11,000 accepted churn rows of which 3 positive, none on the anchor sample's stride."""
    frame = pd.DataFrame(churn_rows(14_000, seed=4))
    frame["churned"] = 0
    frame.loc[[1001, 5003, 9002, 10, 20, 30, 40, 12001, 13002], "churned"] = 1
    scorer = churn_scorer(frame.iloc[:1000])
    parts = [frame.iloc[start : start + 500] for start in range(12_000, 14_000, 500)]
    game = SurrogateGame(
        scorer, frame.iloc[1000:12_000], parts, max_base_rows=100_000, higher_is_better=True
    )
    game.prepare(COALITIONS)
    return game


def test_a_rare_class_the_anchor_sample_misses_values_as_without_the_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sampled = _rare_positives_game()
    values = [sampled.value(c) for c in COALITIONS]
    assert np.all(np.isfinite(sampled.full_fit))
    monkeypatch.setattr(surrogate_fits, "ANCHOR_SAMPLE_ROWS", 10**9)  # every row from zero
    unsampled = _rare_positives_game()
    assert values == [unsampled.value(c) for c in COALITIONS]
    np.testing.assert_allclose(sampled.full_fit, unsampled.full_fit, atol=1e-3)


def _binomial_part(rows: int, seed: int) -> LogisticPart:
    rng = np.random.default_rng(seed)
    x = np.column_stack([rng.normal(size=(rows, 3)), np.ones(rows)])
    y = (x[:, :1] + rng.normal(size=(rows, 1)) > 0.5).astype(float)
    return LogisticPart(x, y, np.ones(rows))


def test_a_start_worse_than_zero_is_not_taken() -> None:
    parts = [_binomial_part(400, seed) for seed in range(3)]
    pen = np.array([1.0, 1.0, 1.0, 0.0])
    from_zero = logistic_fit(parts, pen)
    runaway = np.array([[5.0, -3.0, 2.0, -40.0]])  # far worse than zero
    np.testing.assert_allclose(logistic_fit(parts, pen, start=runaway), from_zero, atol=1e-6)


def test_coalitions_whose_chord_matrices_are_all_singular_are_fitted_by_newton() -> None:
    parts = [_binomial_part(300, seed) for seed in range(3)]
    dims = parts[0].x.shape[1]
    coalitions = [[0], [0, 1], [1, 2]]
    zero = np.zeros((dims, dims))  # no curvature and no penalty: every chord matrix singular
    fits = coalition_fits(parts, np.zeros((1, dims)), [zero] * 3, coalitions, np.zeros((3, dims)))
    for members, fit in zip(coalitions, fits, strict=True):
        expected = logistic_fit([parts[i] for i in members], np.zeros(dims))
        np.testing.assert_allclose(fit, expected, atol=1e-6)
