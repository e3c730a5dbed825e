"""The MSR split of bench/_msr.py on hand-made games (no fits): over a design holding every
coalition equally often, MSR's Banzhaf values and the coalition means are the game's own."""

from __future__ import annotations

from itertools import product

import numpy as np
import pandas as pd
import pytest

from bench import _msr
from pipeline.rewards.valuation import Player

WEIGHTS = (1.0, 2.0, 3.0)


def game(members: tuple[int, ...]) -> float:
    """Additive weights, +2 when players 0 and 1 are both in, +3 when all three are."""
    value = sum(WEIGHTS[i] for i in members)
    value += 2.0 * ({0, 1} <= set(members)) + 3.0 * (len(members) == 3)
    return value


def full_design(repeats: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Every coalition of 3 players `repeats` times, scored 0.8 + v / 100."""
    rows = [np.asarray(z, dtype=bool) for z in product((False, True), repeat=3)] * repeats
    included = np.stack(rows)
    scores = np.asarray([0.8 + game(tuple(np.flatnonzero(z))) / 100 for z in included])
    return included, scores


def test_msr_banzhaf_of_a_full_design_is_the_exact_banzhaf_value() -> None:
    included, scores = full_design()
    # Banzhaf: the weight, half of the pair's 2 for players 0 and 1, a quarter of the 3.
    expected = np.asarray([1 + 1 + 0.75, 2 + 1 + 0.75, 3 + 0.75]) / 100
    assert _msr.banzhaf(included, scores) == pytest.approx(expected)


def test_msr_shapley_of_a_full_design_is_the_exact_shapley_split() -> None:
    included, scores = full_design()
    # Shapley: the weight, half of the pair's 2 for players 0 and 1, a third of the 3.
    shapley = np.asarray([1 + 1 + 1, 2 + 1 + 1, 3 + 1])
    assert _msr.shapley_fractions(included, scores) == pytest.approx(shapley / shapley.sum())


def test_banzhaf_fractions_reject_non_positive_values_and_share_the_rest() -> None:
    fractions = _msr.banzhaf_fractions(np.asarray([3.0, -1.0, 1.0, 0.0]))
    assert fractions == pytest.approx([0.75, 0.0, 0.25, 0.0])


def test_a_coalition_no_fit_drew_gets_the_additive_model() -> None:
    included, _ = full_design(1)
    additive = np.asarray([0.8 + sum(WEIGHTS[i] for i in np.flatnonzero(z)) for z in included])
    drawn = ~np.all(included == [True, True, False], axis=1)  # {0, 1} never drawn
    means = _msr.coalition_means(included[drawn], additive[drawn])
    assert means[frozenset({0, 1})] == pytest.approx(0.8 + 3.0)


def test_coins_follow_a_contribution_s_rows_not_its_position() -> None:
    frames = [pd.DataFrame({"x": [i, i + 1], "y": [0, 1]}) for i in range(3)]
    players = [Player(f"c{i}", f) for i, f in enumerate(frames)]
    coins = _msr.coins(_msr.contribution_keys(players), 64)
    renamed = [Player(f"other{i}", p.frame) for i, p in enumerate(reversed(players))]
    again = _msr.coins(_msr.contribution_keys(renamed), 64)
    assert np.array_equal(coins, again[:, ::-1])
    assert 0.3 < coins.mean() < 0.7  # about half heads
