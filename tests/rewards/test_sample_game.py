"""The split of a batch beyond the row budget, played by the model on a keyed sample of the
accepted rows (issue 35): the properties of issue 9, stability to what no supplier controls,
and the model's own split where the surrogate's is not.

The sample game is forced on small real data by a row budget the exact game is over and a
`sample_min_rows` the sample is above.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from bench._faithfulness_scale import scale_scenario
from pipeline.core.config import ConfigError, load_settings
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.sample_game import keyed_sample, sample_size
from pipeline.rewards.valuation import (
    EXACT,
    NOISE,
    SAMPLE_EXACT,
    SHARE_REJECTED,
    SURROGATE_EXACT,
    SURROGATE_SAMPLED,
    Player,
    ValuationSettings,
    value_batch,
)

CHURN = pd.DataFrame(churn_rows(8_000, seed=7))
BENCH, REST = CHURN.iloc[:2_000], CHURN.iloc[2_000:].reset_index(drop=True)
# The accepted rows lack every two-year contract: contributions drawn like the benchmark help.
BASE = REST[REST["contract"] != "two-year"].iloc[:2_000].reset_index(drop=True)
# Players of 200 rows on 2,000 accepted rows. Three: the exact game trains 7 x 2,000 + 4 x 600
# = 16,400 rows; a budget of 6,000 leaves (6,000 - 4 x 600) / 8 = 450 accepted rows for each
# coalition of the sample game, its own "without" included (two players: 1,300).
SAMPLE = ValuationSettings(resamples=200, coalition_row_budget=6_000, sample_min_rows=400)
ALL_ROWS = ValuationSettings(resamples=200)


def _scorer(estimator: str = "logistic_regression") -> BenchmarkScorer:
    return BenchmarkScorer(
        BENCH,
        task_type="classification",
        estimator=estimator,
        target_column="churned",
        metric_name="accuracy",
    )


def _pieces(count: int, size: int = 200) -> list[pd.DataFrame]:
    rows = REST.iloc[-2_000:]
    return [rows.iloc[i * size : (i + 1) * size].reset_index(drop=True) for i in range(count)]


def _value(frames: dict[str, pd.DataFrame], **options: Any) -> Any:
    return value_batch(
        options.pop("scorer", None) or _scorer(),
        options.pop("base", BASE),
        [Player(key, frame) for key, frame in frames.items()],
        higher_is_better=True,
        settings=options.pop("settings", SAMPLE),
    )


def test_the_sample_is_as_large_as_the_budget_allows() -> None:
    coalitions = [frozenset(), frozenset({0}), frozenset({1}), frozenset({0, 1})]
    assert sample_size(coalitions, [60, 40], 1_000) == (1_000 - 200) // 4
    assert sample_size(coalitions, [600, 400], 1_000) < 0  # the contributions alone are over it
    result = _value(dict(zip("abc", _pieces(3), strict=True)))
    assert result.method == SAMPLE_EXACT
    assert result.sample_rows == 450
    # The sample's 8 coalitions, and the model with the batch on all the accepted rows.
    assert result.coalitions == 8 + 2


def test_shares_add_up_to_the_model_s_own_pool_and_ignore_the_order() -> None:
    frames = dict(zip("abc", _pieces(3), strict=True))
    forward = _value(frames)
    backward = _value(dict(reversed(frames.items())))
    real = _value(frames, settings=ALL_ROWS)
    assert forward.method == SAMPLE_EXACT and real.method == EXACT
    # The pool is the model's on all the accepted rows, whatever game split it.
    assert forward.pool_pct == pytest.approx(real.pool_pct)
    assert forward.interval == real.interval
    assert math.fsum(forward.shares.values()) == pytest.approx(forward.pool_pct)
    assert forward.shares == backward.shares


def test_copies_share_one_value_and_a_split_dataset_is_paid_as_the_whole() -> None:
    piece, other, _ = _pieces(3)
    single = _value({"a": piece, "c": other})
    doubled = _value({"a": piece, "a-copy": piece.copy(), "c": other})
    assert single.method == doubled.method == SAMPLE_EXACT
    assert doubled.shares["a"] == pytest.approx(doubled.shares["a-copy"])
    assert doubled.shares["a"] + doubled.shares["a-copy"] == pytest.approx(single.shares["a"])
    whole = pd.concat(_pieces(2), ignore_index=True)
    alone = _value({"whole": whole})
    halves = _value({"p0": whole.iloc[:200], "p1": whole.iloc[200:].reset_index(drop=True)})
    assert halves.method == SAMPLE_EXACT
    assert math.fsum(halves.shares.values()) == pytest.approx(alone.pool_pct)


def test_a_harmful_contribution_is_rejected_and_the_rest_share_their_pool() -> None:
    good = _pieces(2)
    flipped = _pieces(3)[2].assign(churned=lambda f: 1 - f.churned)
    result = _value({"a": good[0], "b": good[1], "flipped": flipped})
    assert result.method == SAMPLE_EXACT
    assert result.rejected == {"flipped": SHARE_REJECTED} and result.shares["flipped"] <= 0
    good_only = _value({"a": good[0], "b": good[1]})
    # The model left behind is trained without the flipped rows.
    assert result.score_with == pytest.approx(good_only.score_with)
    assert math.fsum(result.shares[k] for k in "ab") == pytest.approx(result.pool_pct)
    assert all(result.shares[k] > 0 for k in "ab")


def test_a_batch_within_noise_is_held_back_on_the_sample_path_too() -> None:
    # Rows like the accepted ones (no new contract), their labels shuffled: nothing to learn.
    like_base = REST[REST["contract"] != "two-year"].iloc[2_000:2_400].reset_index(drop=True)
    shuffled = [
        piece.assign(churned=piece.churned.sample(frac=1, random_state=i).to_numpy())
        for i, piece in enumerate((like_base.iloc[:200], like_base.iloc[200:]))
    ]
    result = _value({"a": shuffled[0], "b": shuffled[1]})
    assert result.method == SAMPLE_EXACT
    assert not result.significant
    assert set(result.rejected.values()) <= {NOISE, SHARE_REJECTED}


def test_one_accepted_row_fewer_moves_the_sample_by_that_row_and_the_cut() -> None:
    scorer = _scorer()
    sample = keyed_sample(scorer, BASE, 450)
    for left_out in (0, 570, 1_999):
        fewer = keyed_sample(scorer, BASE.drop(index=left_out), 450)
        kept = {tuple(r) for r in sample.to_numpy()}
        now = {tuple(r) for r in fewer.to_numpy()}
        assert len(kept - now) <= 2  # the row left out, and the one at a class's cut
    shuffled = BASE.sample(frac=1, random_state=5).reset_index(drop=True)
    assert keyed_sample(scorer, shuffled, 450).equals(sample)


def test_reordering_the_accepted_rows_changes_no_share() -> None:
    frames = dict(zip("abc", _pieces(3), strict=True))
    shuffled = BASE.sample(frac=1, random_state=9).reset_index(drop=True)
    first = _value(frames, scorer=_scorer("random_forest_classifier"))
    again = _value(frames, base=shuffled, scorer=_scorer("random_forest_classifier"))
    assert first.method == SAMPLE_EXACT
    assert first.shares == again.shares


def test_too_small_a_sample_or_too_many_players_go_to_the_surrogate() -> None:
    frames = dict(zip("abc", _pieces(3), strict=True))
    small = ValuationSettings(resamples=200, coalition_row_budget=6_000, sample_min_rows=451)
    assert _value(frames, settings=small).method == SURROGATE_EXACT
    many = ValuationSettings(
        resamples=200,
        coalition_row_budget=6_000,
        sample_min_rows=1,
        exact_max_players=2,
        shapley_budget=6,
    )
    assert _value(frames, settings=many).method == SURROGATE_SAMPLED


def test_the_split_follows_the_model_where_the_surrogate_does_not() -> None:
    # The benchmark's two-year rows are a category the accepted rows lack. Logistic
    # regression's prediction for them then depends on where its solver stopped, which the
    # surrogate (solved to convergence) does not reproduce: its split is not the model's.
    # The payout bench's scenario: 10,000 accepted rows, contributions of 1,000 rows with a
    # tenth and all of their labels shuffled (seed 21).
    scorer, base, players = scale_scenario(10_000, 2, 21, "logistic_regression")

    def fractions(settings: ValuationSettings) -> tuple[str, np.ndarray]:
        found = value_batch(scorer, base, players, higher_is_better=True, settings=settings)
        shares = np.array([max(found.shares[p.key], 0.0) for p in players])
        return found.method, shares / shares.sum()

    method, model = fractions(ValuationSettings(resamples=200, coalition_row_budget=10**6))
    assert method == EXACT
    # 4 x 5,000 accepted rows and 2 x 2,000 contributed ones: a sample of half. Measured: the
    # sample's split 3.0 % of the pool from the model's, the surrogate's 11.2 %.
    sample = ValuationSettings(resamples=200, coalition_row_budget=24_000, sample_min_rows=2_000)
    method, sampled = fractions(sample)
    assert method == SAMPLE_EXACT
    method, surrogate = fractions(ValuationSettings(resamples=200, coalition_row_budget=0))
    assert method == SURROGATE_EXACT
    sampled_error = float(np.max(np.abs(sampled - model)))
    surrogate_error = float(np.max(np.abs(surrogate - model)))
    assert sampled_error < 0.1 < surrogate_error, (sampled_error, surrogate_error)


def test_the_operator_sets_the_smallest_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ValuationSettings.from_settings(load_settings()).sample_min_rows == 20_000
    monkeypatch.setenv("VALUATION_SAMPLE_MIN_ROWS", "25000")
    assert ValuationSettings.from_settings(load_settings()).sample_min_rows == 25_000
    monkeypatch.setenv("VALUATION_SAMPLE_MIN_ROWS", "0")
    with pytest.raises(ConfigError, match="VALUATION_SAMPLE_MIN_ROWS"):
        load_settings()
