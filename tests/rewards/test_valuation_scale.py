"""Valuation of large batches (issue 18): the surrogate game keeps the properties of issue 9,
a known "without" saves its training, and a batch trains only with and without.

The surrogate is forced on small real data with `coalition_row_budget=0` (it is chosen on its
own when the estimator's coalitions would train more rows than the budget).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.surrogate import SurrogateGame, stratified_sample
from pipeline.rewards.valuation import (
    CACHE_HIT,
    CACHE_MISS,
    EXACT,
    SHARE_REJECTED,
    SURROGATE_EXACT,
    SURROGATE_SAMPLED,
    Player,
    ValuationSettings,
    value_batch,
)
from tests.support.valuation import CANCER, DIABETES

SURROGATE = ValuationSettings(resamples=200, coalition_row_budget=0)
BENCH, REST = CANCER.iloc[:169], CANCER.iloc[169:].reset_index(drop=True)


def _scorer(metric: str = "accuracy", estimator: str = "logistic_regression") -> BenchmarkScorer:
    return BenchmarkScorer(
        BENCH,
        task_type="classification",
        estimator=estimator,
        target_column="target",
        metric_name=metric,
    )


def _pieces(frame: pd.DataFrame, size: int, count: int) -> list[pd.DataFrame]:
    return [frame.iloc[i * size : (i + 1) * size].reset_index(drop=True) for i in range(count)]


def _value(scorer: BenchmarkScorer, frames: dict[str, pd.DataFrame], **options: Any) -> Any:
    settings = options.pop("settings", SURROGATE)
    return value_batch(
        scorer,
        options.pop("base", None),
        [Player(key, frame) for key, frame in frames.items()],
        higher_is_better=options.pop("higher_is_better", True),
        settings=settings,
        **options,
    )


def test_surrogate_shares_add_up_to_the_real_pool_and_ignore_the_order() -> None:
    scorer = _scorer()
    frames = dict(zip("abc", _pieces(REST, 100, 3), strict=True))
    base = REST.iloc[350:370]
    forward = _value(scorer, frames, base=base)
    backward = _value(scorer, dict(reversed(frames.items())), base=base)
    real = _value(scorer, frames, base=base, settings=ValuationSettings(resamples=200))
    assert forward.method == SURROGATE_EXACT and real.method == EXACT
    # The pool is the real model's, whatever splits it; only with and without were trained.
    assert forward.pool_pct == pytest.approx(real.pool_pct)
    assert forward.interval == real.interval
    assert math.fsum(forward.shares.values()) == pytest.approx(forward.pool_pct)
    assert forward.shares == backward.shares
    assert forward.coalitions == 2 and real.coalitions == 8


def test_surrogate_gives_copies_one_value_and_a_split_dataset_its_whole_pool() -> None:
    scorer = _scorer("roc_auc")
    piece, other = _pieces(REST, 100, 2)
    single = _value(scorer, {"a": piece, "c": other})
    doubled = _value(scorer, {"a": piece, "a-copy": piece.copy(), "c": other})
    assert doubled.shares["a"] == pytest.approx(doubled.shares["a-copy"])
    assert doubled.shares["a"] + doubled.shares["a-copy"] == pytest.approx(single.shares["a"])
    assert doubled.shares["c"] == pytest.approx(single.shares["c"])
    whole = REST.iloc[:400]
    alone = _value(scorer, {"whole": whole})
    for k in (2, 4):
        split = _value(scorer, {f"p{i}": p for i, p in enumerate(_pieces(whole, 400 // k, k))})
        assert len(split.accepted) == k
        assert math.fsum(split.shares.values()) == pytest.approx(alone.pool_pct, rel=0.05)


@pytest.mark.parametrize(
    "settings",
    [
        SURROGATE,
        ValuationSettings(
            resamples=200, coalition_row_budget=0, exact_max_players=2, shapley_budget=10
        ),
    ],
    ids=["exact", "sampled"],
)
def test_surrogate_rejects_a_harmful_contribution_and_the_rest_share_their_pool(
    settings: ValuationSettings,
) -> None:
    scorer = _scorer()
    good = _pieces(REST, 80, 3)
    flipped = REST.iloc[300:400].assign(target=lambda f: 1 - f.target)
    result = _value(
        scorer, {"a": good[0], "b": good[1], "c": good[2], "flipped": flipped}, settings=settings
    )
    assert result.method == (SURROGATE_EXACT if settings is SURROGATE else SURROGATE_SAMPLED)
    assert result.rejected == {"flipped": SHARE_REJECTED} and result.shares["flipped"] <= 0
    good_only = _value(scorer, {"a": good[0], "b": good[1], "c": good[2]}, settings=settings)
    # The model left behind is trained without the flipped rows: with, and without, trained.
    assert result.score_with == pytest.approx(good_only.score_with)
    assert math.fsum(result.shares[k] for k in "abc") == pytest.approx(result.pool_pct)
    assert all(result.shares[k] > 0 for k in "abc")
    assert result.coalitions == 2


def test_surrogate_regression_is_the_least_squares_game() -> None:
    scorer = BenchmarkScorer(
        DIABETES.iloc[:192],
        task_type="regression",
        estimator="linear_regression",
        target_column="target",
        metric_name="r2",
    )
    pieces = [DIABETES.iloc[192 + i * 60 : 192 + (i + 1) * 60] for i in range(3)]
    noisy = DIABETES.iloc[372:432].assign(
        target=lambda f: f.target.sample(frac=1, random_state=1).to_numpy()
    )
    frames = {"a": pieces[0], "b": pieces[1], "c": pieces[2], "noise": noisy}
    surrogate = _value(scorer, frames)
    real = _value(scorer, frames, settings=ValuationSettings(resamples=200))
    assert surrogate.rejected == real.rejected == {"noise": SHARE_REJECTED}
    # The surrogate of linear regression is linear regression: the same shares, not close ones.
    for key in "abc":
        assert surrogate.shares[key] == pytest.approx(real.shares[key], rel=1e-6)


def test_a_known_without_trains_one_model_for_a_batch_of_one() -> None:
    scorer = _scorer()
    first = _value(scorer, {"a": REST.iloc[:100]}, base=REST.iloc[350:400])
    assert first.without_cache == CACHE_MISS and first.coalitions == 2
    again = _value(scorer, {"a": REST.iloc[:100]}, base=REST.iloc[350:400], without=first.without)
    assert again.without_cache == CACHE_HIT and again.coalitions == 1
    assert (again.pool_pct, again.interval, again.shares) == (
        first.pool_pct,
        first.interval,
        first.shares,
    )


def test_a_large_accepted_set_is_sampled_by_class_with_weights_that_keep_its_mass() -> None:
    sample, weight = stratified_sample(REST, "target", 100, stratify=True)
    assert abs(len(sample) - 100) <= 2
    assert sample.target.mean() == pytest.approx(REST.target.mean(), abs=0.02)
    assert weight * len(sample) == pytest.approx(len(REST))
    game = SurrogateGame(
        _scorer(), REST.iloc[:300], [REST.iloc[300:400]], max_base_rows=100, higher_is_better=True
    )
    assert game.sample_rows == len(game.parts[0].x) <= 102
    assert np.all(game.parts[0].weight == pytest.approx(300 / game.sample_rows))
    assert game.value(frozenset()) == 0.0


def test_the_accepted_sample_is_seeded_so_a_valuation_repeats() -> None:
    """The surrogate's sample of a large accepted set is the same on every run (shares repeat
    to the last bit), and another seed draws other rows."""
    sample, _ = stratified_sample(REST, "target", 100, stratify=True)
    again, _ = stratified_sample(REST, "target", 100, stratify=True)
    other, _ = stratified_sample(REST, "target", 100, stratify=True, seed=12)
    assert sample.index.tolist() == again.index.tolist() != other.index.tolist()
    settings = ValuationSettings(resamples=200, coalition_row_budget=0, surrogate_max_base_rows=100)
    frames = {key: REST.iloc[300 + 30 * i : 330 + 30 * i] for i, key in enumerate("abc")}
    first, second = (
        _value(_scorer(), frames, base=REST.iloc[:300], settings=settings) for _ in "12"
    )
    assert first.sample_rows == second.sample_rows <= 102
    assert first.shares == second.shares
