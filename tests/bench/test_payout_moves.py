"""The payout bench's stability figures (`bench/_payout.py`): a paid share's move is measured in
the split, apart from the pool's move, so the 2 % share goal and the 10 % pool goal of issue 35
measure different things; the tokens' move (both at once) is printed beside them."""

from __future__ import annotations

import pytest

from bench import _payout
from tests.bench.valuations import paid_batch


def test_a_pool_that_grows_with_the_same_split_moves_the_pool_not_the_split() -> None:
    moved = _payout.moves(paid_batch({"a": 3.0, "b": 1.0}), paid_batch({"a": 3.3, "b": 1.1}))
    assert moved["share_move"] == pytest.approx(0.0, abs=1e-9)
    assert moved["pool_move"] == pytest.approx(10.0)
    assert moved["tokens_move"] == pytest.approx(7.5)  # a's 0.3 of a pool of 4
    assert moved["flips"] == 0


def test_a_split_that_moves_under_the_same_pool_moves_the_split_and_the_tokens() -> None:
    moved = _payout.moves(paid_batch({"a": 3.0, "b": 1.0}), paid_batch({"a": 2.0, "b": 2.0}))
    assert moved["share_move"] == pytest.approx(25.0)
    assert moved["pool_move"] == pytest.approx(0.0, abs=1e-9)
    assert moved["tokens_move"] == pytest.approx(25.0)


def test_a_contribution_that_turns_rejected_is_a_flip_and_takes_its_whole_fraction() -> None:
    moved = _payout.moves(
        paid_batch({"a": 3.0, "b": 1.0}), paid_batch({"a": 3.0, "b": -0.1}, ("b",))
    )
    assert moved["flips"] == 1
    assert moved["share_move"] == pytest.approx(25.0)  # a: 75 % -> 100 %, b: 25 % -> 0


def test_the_fits_the_goals_need_grow_with_the_square_of_the_worst_miss() -> None:
    assert _payout.fits_for_goals({"share_move": 2.0, "pool_move": 5.0}, 4) == 4  # at the goal
    assert _payout.fits_for_goals({"share_move": 1.0, "pool_move": 5.0}, 4) == 1  # fewer do
    assert _payout.fits_for_goals({"share_move": 4.0, "pool_move": 5.0}, 4) == 16
    assert _payout.fits_for_goals({"share_move": 1.0, "pool_move": 30.0}, 1) == 9
