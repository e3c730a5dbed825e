"""Valuation of a batch (issue 9 §4, §5): bootstrap significance, floors, Shapley shares.

Pure domain tests on scikit-learn's bundled real datasets; `tests/rewards/test_payouts.py` runs the
same rules through the pipeline and the store.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine

from pipeline.evaluation.metrics import (
    improvement_floor,
    improvement_pct,
    metric_samples,
    metric_score,
)
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.interval import improvement_interval
from pipeline.rewards.shapley import exact_shapley, kernel_shapley
from pipeline.rewards.valuation import (
    EXACT,
    NOISE,
    SAMPLED,
    SHARE_REJECTED,
    Player,
    ValuationSettings,
    kernel_coalitions,
    value_batch,
)

# Few resamples: these tests check rules, not the precision of the interval.
FAST = ValuationSettings(resamples=200)


def _shuffled(frame: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    return frame.sample(frac=1, random_state=seed).reset_index(drop=True)


CANCER = _shuffled(load_breast_cancer(as_frame=True).frame)
WINE = _shuffled(load_wine(as_frame=True).frame)
DIABETES = load_diabetes(as_frame=True).frame
CANCER_BENCH, CANCER_REST = CANCER.iloc[:169], CANCER.iloc[169:].reset_index(drop=True)


def _scorer(bench: pd.DataFrame, metric: str, **options: Any) -> BenchmarkScorer:
    task = "regression" if metric in ("rmse", "mae", "r2") else "classification"
    estimator = "linear_regression" if task == "regression" else "logistic_regression"
    return BenchmarkScorer(
        bench,
        task_type=task,
        estimator=options.pop("estimator", estimator),
        target_column="target",
        metric_name=metric,
        **options,
    )


def _pieces(frame: pd.DataFrame, size: int, count: int) -> list[pd.DataFrame]:
    return [frame.iloc[i * size : (i + 1) * size].reset_index(drop=True) for i in range(count)]


def _value(
    scorer: BenchmarkScorer,
    frames: dict[str, pd.DataFrame],
    base: pd.DataFrame | None = None,
    settings: ValuationSettings = FAST,
    higher_is_better: bool = True,
) -> Any:
    return value_batch(
        scorer,
        base,
        [Player(key, frame) for key, frame in frames.items()],
        higher_is_better=higher_is_better,
        settings=settings,
    )


# --- metrics per resample ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "metric"),
    [
        ("cancer", "accuracy"),
        ("cancer", "f1"),
        ("cancer", "roc_auc"),
        ("wine", "accuracy"),
        ("wine", "f1"),
        ("wine", "roc_auc"),
        ("diabetes", "rmse"),
        ("diabetes", "mae"),
        ("diabetes", "r2"),
    ],
)
def test_vectorised_metric_equals_scikit_learn_on_every_row_and_on_a_resample(
    data: str, metric: str
) -> None:
    frame = {"cancer": CANCER, "wine": WINE, "diabetes": DIABETES}[data]
    bench, train = frame.iloc[:120].reset_index(drop=True), frame.iloc[120:200]
    predictions = _scorer(bench, metric).predict(train)
    ones = np.ones((1, len(bench)))
    assert metric_samples(predictions, ones)[0] == pytest.approx(metric_score(predictions))
    # A resample as counts equals the metric on the rows drawn, repeated.
    rng = np.random.default_rng(1)
    drawn = rng.integers(0, len(bench), len(bench))
    counts = np.bincount(drawn, minlength=len(bench))[None, :]
    resampled = type(predictions)(
        predictions.metric_name,
        predictions.y_true[drawn],
        predictions.outputs[drawn],
        predictions.classes,
    )
    assert metric_samples(predictions, counts)[0] == pytest.approx(metric_score(resampled))


# --- significance ------------------------------------------------------------------------------


def test_a_real_improvement_has_an_interval_above_zero_and_is_accepted() -> None:
    scorer = _scorer(CANCER_BENCH, "accuracy")
    result = _value(scorer, {"a": CANCER_REST.iloc[:150]})
    assert result.accepted == ["a"] and result.significant
    assert result.interval is not None
    assert 0 < result.interval.low < result.pool_pct < result.interval.high
    assert result.interval.level == 0.95 and result.interval.resamples == 200


def test_a_gain_within_noise_is_rejected_with_its_interval() -> None:
    # Diabetes targets shrunk to 2 % of their spread around the mean: r2 0.000 → 0.009.
    shrunk = DIABETES.iloc[192:342].copy()
    shrunk["target"] = shrunk.target.mean() + 0.02 * (shrunk.target - shrunk.target.mean())
    result = _value(_scorer(DIABETES.iloc[:192], "r2"), {"shrunk": shrunk})
    assert 0 < result.pool_pct < 2
    assert result.interval is not None and result.interval.low < 0 < result.interval.high
    assert result.accepted == [] and result.rejected == {"shrunk": NOISE}
    assert not result.significant


def test_the_interval_is_the_same_for_the_same_data_and_narrows_with_the_level() -> None:
    scorer = _scorer(CANCER_BENCH, "roc_auc")
    without = scorer.predict(CANCER_REST.iloc[:100])
    with_ = scorer.predict(CANCER_REST.iloc[:300])
    options: dict[str, Any] = {"higher_is_better": True, "denominator": 0.5, "resamples": 300}
    first = improvement_interval(without, with_, level=0.95, **options)
    assert first == improvement_interval(without, with_, level=0.95, **options)
    narrower = improvement_interval(without, with_, level=0.8, **options)
    assert first.low <= narrower.low <= narrower.high <= first.high


# --- bounded improvements ----------------------------------------------------------------------


def test_floors_bound_the_denominator() -> None:
    y = DIABETES.target.to_numpy()
    assert improvement_floor("accuracy", [0, 1]) == 0.5
    assert improvement_floor("r2", y) == 1.0
    assert improvement_floor("rmse", y) == pytest.approx(np.std(y))
    assert improvement_floor("mae", y) == pytest.approx(np.mean(np.abs(y - y.mean())))
    # A near-useless baseline no longer divides the gain: r2 0.003 → 0.33 is 32.7 points.
    assert improvement_pct(0.33, 0.003, "higher_is_better", floor=1.0) == pytest.approx(32.7)
    assert improvement_pct(0.33, 0.003, "higher_is_better") > 10_000  # without the floor
    # Above the floor the relative change is unchanged: accuracy 0.8 → 0.9 is 12.5 %.
    assert improvement_pct(0.9, 0.8, "higher_is_better", floor=0.5) == pytest.approx(12.5)


def test_a_sabotaged_regression_baseline_cannot_inflate_the_next_improvement() -> None:
    bench, honest = DIABETES.iloc[:192], DIABETES.iloc[342:]
    useless = DIABETES.iloc[192:342].copy()
    useless["target"] = useless.target.mean() + 0.02 * (useless.target - useless.target.mean())
    scorer = _scorer(bench, "r2")
    against_sabotage = _value(scorer, {"b": honest}, base=useless)
    against_honest = _value(scorer, {"b": honest})
    assert against_sabotage.score_without == pytest.approx(0.009, abs=0.005)
    # Without the floor this was +3,600 %; now it is less than the honest figure.
    assert 20 < against_sabotage.pool_pct < against_honest.pool_pct < 60
    for metric in ("rmse", "mae"):
        lower = _value(_scorer(bench, metric), {"b": honest}, base=useless, higher_is_better=False)
        assert 0 < lower.pool_pct < 100


# --- Shapley shares ----------------------------------------------------------------------------


def test_shares_add_up_to_the_pool_and_ignore_the_submission_order() -> None:
    scorer = _scorer(CANCER_BENCH, "accuracy")
    frames = dict(zip("abc", _pieces(CANCER_REST, 100, 3), strict=True))
    forward = _value(scorer, frames, base=CANCER_REST.iloc[350:370])
    backward = _value(scorer, dict(reversed(frames.items())), base=CANCER_REST.iloc[350:370])
    assert forward.method == EXACT and forward.players == 3
    assert math.fsum(forward.shares.values()) == pytest.approx(forward.pool_pct)
    assert forward.shares == backward.shares
    assert forward.pool_pct == backward.pool_pct and forward.interval == backward.interval


def test_four_equally_good_pieces_get_near_equal_shares() -> None:
    scorer = _scorer(CANCER_BENCH, "accuracy")
    result = _value(scorer, dict(zip("abcd", _pieces(CANCER_REST, 100, 4), strict=True)))
    shares = sorted(result.shares.values())
    assert sorted(result.accepted) == ["a", "b", "c", "d"]
    mean = result.pool_pct / 4
    assert all(abs(s - mean) < 0.25 * mean for s in shares), shares
    # One after another the first took everything and the others nothing.
    first = _value(scorer, {"a": _pieces(CANCER_REST, 100, 1)[0]})
    later = _value(scorer, {"b": _pieces(CANCER_REST, 100, 2)[1]}, base=CANCER_REST.iloc[:100])
    assert first.pool_pct > 40 and later.pool_pct <= 0.5


def test_identical_contributions_share_equally_and_are_not_paid_twice() -> None:
    scorer = _scorer(CANCER_BENCH, "accuracy")
    piece, other = _pieces(CANCER_REST, 100, 2)
    single = _value(scorer, {"a": piece, "c": other})
    doubled = _value(scorer, {"a": piece, "a-copy": piece.copy(), "c": other})
    assert doubled.shares["a"] == pytest.approx(doubled.shares["a-copy"])
    # The copy adds no information: the pair earns what one earned, not twice as much, and
    # takes nothing from the other contribution.
    pair = doubled.shares["a"] + doubled.shares["a-copy"]
    assert pair == pytest.approx(single.shares["a"])
    assert doubled.shares["c"] == pytest.approx(single.shares["c"])
    assert doubled.pool_pct == pytest.approx(single.pool_pct)
    assert doubled.accepted_rows == single.accepted_rows == 200


@pytest.mark.parametrize("k", [2, 4])
def test_splitting_a_dataset_into_pieces_keeps_the_pool(k: int) -> None:
    scorer = _scorer(CANCER_BENCH, "roc_auc")
    whole = CANCER_REST.iloc[:400]
    alone = _value(scorer, {"whole": whole})
    split = _value(scorer, {f"p{i}": p for i, p in enumerate(_pieces(whole, 400 // k, k))})
    assert len(split.accepted) == k
    assert math.fsum(split.shares.values()) == pytest.approx(alone.pool_pct, rel=0.05)


def test_a_harmful_contribution_is_rejected_and_the_pool_reshared_among_the_rest() -> None:
    scorer = _scorer(CANCER_BENCH, "accuracy")
    good_a, good_b, flipped = _pieces(CANCER_REST, 100, 3)
    flipped = flipped.assign(target=1 - flipped.target)
    result = _value(scorer, {"a": good_a, "b": good_b, "flipped": flipped})
    assert result.rejected == {"flipped": SHARE_REJECTED}
    assert result.shares["flipped"] <= 0
    assert sorted(result.accepted) == ["a", "b"]
    good_only = _value(scorer, {"a": good_a, "b": good_b})
    assert result.pool_pct == pytest.approx(good_only.pool_pct)
    assert result.shares["a"] + result.shares["b"] == pytest.approx(result.pool_pct)
    # The model the batch leaves behind is trained without the flipped rows.
    assert result.score_with == pytest.approx(good_only.score_with)


def test_in_a_sampled_batch_the_rest_share_their_pool_in_proportion() -> None:
    scorer = _scorer(CANCER_BENCH, "accuracy")
    good = _pieces(CANCER_REST, 80, 3)
    flipped = CANCER_REST.iloc[300:400].assign(target=lambda f: 1 - f.target)
    frames = {"a": good[0], "b": good[1], "c": good[2], "flipped": flipped}
    settings = ValuationSettings(resamples=100, exact_max_players=2, shapley_budget=10)
    result = _value(scorer, frames, settings=settings)
    assert result.method == SAMPLED
    assert result.rejected == {"flipped": SHARE_REJECTED}
    assert sorted(result.accepted) == ["a", "b", "c"]
    good_only = _value(scorer, {"a": good[0], "b": good[1], "c": good[2]})
    assert result.pool_pct == pytest.approx(good_only.pool_pct)
    assert math.fsum(result.shares[k] for k in "abc") == pytest.approx(result.pool_pct)
    assert result.coalitions <= 10 + 3


def test_large_batches_are_sampled_with_a_fixed_budget_and_keep_the_properties() -> None:
    scorer = _scorer(CANCER_BENCH, "roc_auc")
    pieces = _pieces(CANCER_REST, 50, 6)
    frames = {f"p{i}": p for i, p in enumerate(pieces)}
    frames["p0-copy"] = pieces[0].copy()
    settings = ValuationSettings(resamples=100, exact_max_players=3, shapley_budget=14)
    forward = _value(scorer, frames, settings=settings)
    backward = _value(scorer, dict(reversed(frames.items())), settings=settings)
    assert forward.method == SAMPLED and forward.players == 7
    # The budget, the full batch, "without", and the rest when a player was rejected.
    assert forward.coalitions <= 14 + 3
    accepted = [forward.shares[k] for k in forward.accepted]
    assert math.fsum(accepted) == pytest.approx(forward.pool_pct)
    assert forward.shares == backward.shares
    assert forward.shares["p0"] == forward.shares["p0-copy"]
    assert forward.players == 7


def test_sampled_shares_approach_the_exact_ones() -> None:
    scorer = _scorer(CANCER_BENCH, "roc_auc")
    frames = dict(zip("abcde", _pieces(CANCER_REST, 60, 5), strict=True))
    exact = _value(scorer, frames)
    # 20 of the 30 coalitions: sizes 1 and 4 enumerated, 2 and 3 sampled.
    settings = ValuationSettings(resamples=100, exact_max_players=2, shapley_budget=20)
    sampled = _value(scorer, frames, settings=settings)
    assert exact.method == EXACT and sampled.method == SAMPLED
    for key in frames:
        assert sampled.shares[key] == pytest.approx(exact.shares[key], abs=0.1 * exact.pool_pct)


def _glove(coalition: frozenset[int]) -> float:
    # Glove game: player 0 holds a left glove, 1 to 3 right gloves; a pair is worth 1.
    return float(0 in coalition and bool(coalition & {1, 2, 3}))


def test_exact_and_kernel_shapley_of_a_known_game() -> None:
    exact = exact_shapley([0, 1, 2, 3], _glove)
    assert exact == pytest.approx({0: 3 / 4, 1: 1 / 12, 2: 1 / 12, 3: 1 / 12})
    # A budget covering every coalition gives the exact values; a smaller one stays close
    # and still adds up to v(all).
    assert kernel_shapley([0, 1, 2, 3], _glove, budget=14) == pytest.approx(exact)
    sampled = kernel_shapley([0, 1, 2, 3], _glove, budget=10)
    assert math.fsum(sampled.values()) == pytest.approx(1.0)
    assert max(sampled, key=lambda p: sampled[p]) == 0


def test_kernel_coalitions_enumerate_the_heaviest_sizes_and_respect_the_budget() -> None:
    chosen = kernel_coalitions(16, 128)
    sizes = [len(c) for c in chosen]
    assert sizes.count(1) == 16 and sizes.count(15) == 16  # enumerated whole
    assert len(chosen) <= 128
    assert math.fsum(chosen.values()) == pytest.approx(1.0)
    assert chosen == kernel_coalitions(16, 128)  # seeded
