"""A binomial surrogate's coalition values skip the benchmark rows whose class the full fit
settles: each coalition's predicted classes are those of its own linear predictor on every row,
however far its coefficients are from the full fit's, and its accuracy is the share of right
answers over every row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.demo.churn_data import churn_rows
from pipeline.rewards import surrogate_values
from pipeline.rewards.surrogate import SurrogateGame
from tests.support.valuation import churn_scorer


@pytest.mark.parametrize("spread", [1e-12, 1e-4, 0.05, 0.5, 5.0])
def test_settled_rows_take_the_class_every_coalition_gives_them(spread: float) -> None:
    game = _churn_game(seed=4)
    full = game.full_fit[0]
    betas = full + np.random.default_rng(1).normal(0.0, spread, (40, len(full)))
    np.testing.assert_array_equal(game._positive(betas), (game.x_bench @ betas.T) > 0.0)


@pytest.mark.parametrize("spread", [1e-4, 0.05, 5.0])
def test_accuracy_from_the_open_rows_is_accuracy_over_every_row(spread: float) -> None:
    game = _churn_game(seed=6)
    full = game.full_fit[0]
    betas = full + np.random.default_rng(2).normal(0.0, spread, (30, len(full)))
    positive = (game.x_bench @ betas.T) > 0.0
    every_row = np.mean(positive == game._truth_index[:, None], axis=0)
    assert game._binomial_accuracy(betas).tolist() == every_row.tolist()  # the same floats


def test_label_codes_by_search_are_the_lookups() -> None:
    labels = [0, 3, 7]
    values = np.array([7, 0, 3, 3, 0, 7], dtype=np.int64)
    code = {label: i for i, label in enumerate(labels)}
    assert surrogate_values._codes(values, labels, code).tolist() == [2, 0, 1, 1, 0, 2]
    mixed = np.array([1, "1", 1.0], dtype=object)
    assert surrogate_values._codes(mixed, [1, "1"], {1: 0, "1": 1}).tolist() == [0, 1, 0]


def _churn_game(seed: int) -> SurrogateGame:
    """Logistic regression's surrogate on demo churn rows: 1,000 benchmark rows, 1,000
    accepted, four parts of 250."""
    frame = pd.DataFrame(churn_rows(3000, seed=seed))
    bench, base = frame.iloc[:1000], frame.iloc[1000:2000]
    parts = [frame.iloc[start : start + 250] for start in range(2000, 3000, 250)]
    scorer = churn_scorer(bench)
    return SurrogateGame(scorer, base, parts, max_base_rows=10_000, higher_is_better=True)


def test_uint64_labels_beyond_int64_are_valued_as_any_labels() -> None:
    frame = pd.DataFrame(churn_rows(3000, seed=4))
    coalitions = [frozenset({0}), frozenset({0, 1}), frozenset({0, 1, 2, 3})]

    def values(labels: tuple[int, int], dtype: type) -> list[float]:
        relabelled = frame.assign(
            churned=np.where(frame["churned"].astype(bool), labels[1], labels[0]).astype(dtype)
        )
        scorer = churn_scorer(relabelled.iloc[:1000])
        parts = [relabelled.iloc[start : start + 250] for start in range(2000, 3000, 250)]
        game = SurrogateGame(
            scorer, relabelled.iloc[1000:2000], parts, max_base_rows=10_000, higher_is_better=True
        )
        game.prepare(coalitions)
        return [game.value(c) for c in coalitions]

    assert values((5, 2**63 + 1), np.uint64) == values((0, 1), np.int64)
