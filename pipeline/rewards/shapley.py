"""Shapley values of a game over a batch's players: exact, and estimated by KernelSHAP.

A game is a callable from a coalition (a frozenset of player indices) to its value, with
v(∅) = 0. `pipeline.rewards.valuation` plays it with the model's estimator or with the
surrogate of `pipeline.rewards.surrogate`; these functions do not care which.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

SHAPLEY_SEED = 7

Coalition = frozenset[int]


def exact_shapley(players: Sequence[int], value: Callable[[Coalition], float]) -> dict[int, float]:
    """Exact Shapley values of `players` for the game `value` (v(∅) must be 0)."""
    n = len(players)
    weights = [math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n) for k in range(n)]
    shares = dict.fromkeys(players, 0.0)
    for i in players:
        others = [p for p in players if p != i]
        for k in range(n):
            for subset in itertools.combinations(others, k):
                s = frozenset(subset)
                shares[i] += weights[k] * (value(s | {i}) - value(s))
    return shares


def kernel_coalitions(players: int, budget: int) -> dict[tuple[int, ...], float]:
    """Coalitions of range(players) and their regression weights for KernelSHAP (`_kernel`).

    A batch asks for them twice a round (which to fit, then the fit): they are computed once
    per size and budget (its seeded draws cost about a millisecond)."""
    return dict(_kernel(players, budget))


@functools.cache
def _kernel(players: int, budget: int) -> tuple[tuple[tuple[int, ...], float], ...]:
    """Coalitions of range(players) and their regression weights for KernelSHAP.

    Coalition sizes are taken in pairs (s, n - s) from the outside in, as the Shapley kernel
    weighs them most; a pair is enumerated whole while the budget allows, with its kernel
    weights. The rest of the budget samples the remaining sizes (probability by their kernel
    weight, uniform within a size) with each coalition's complement, seeded, sharing the
    remaining weight equally. With a budget of 2^n - 2 every coalition is enumerated and the
    result is the exact Shapley value.
    """
    n = players
    size_weight = {s: (n - 1) / (s * (n - s)) for s in range(1, n)}
    scale = math.fsum(size_weight.values())
    size_weight = {s: w / scale for s, w in size_weight.items()}
    chosen: dict[tuple[int, ...], float] = {}
    left = budget
    remaining = list(range(1, n))
    for small in range(1, n // 2 + 1):
        pair = sorted({small, n - small})
        count = sum(math.comb(n, s) for s in pair)
        if count > left:
            break
        for size in pair:
            for c in itertools.combinations(range(n), size):
                chosen[c] = size_weight[size] / math.comb(n, size)
            remaining.remove(size)
        left -= count
    if remaining and left >= 2:
        rng = np.random.default_rng(SHAPLEY_SEED)
        mass = math.fsum(size_weight[s] for s in remaining)
        p = np.array([size_weight[s] / mass for s in remaining])
        draws = left // 2
        for _ in range(draws):
            size = int(rng.choice(remaining, p=p))
            members = tuple(sorted(int(i) for i in rng.choice(n, size, replace=False)))
            complement = tuple(i for i in range(n) if i not in members)
            for c in (members, complement):
                chosen[c] = chosen.get(c, 0.0) + mass / (2 * draws)
    return tuple(chosen.items())


def kernel_shapley(
    players: Sequence[int], value: Callable[[Coalition], float], budget: int
) -> dict[int, float]:
    """Shapley values estimated by KernelSHAP: a weighted least-squares fit of v over the
    coalitions of `kernel_coalitions`, constrained to add up to v(all players).
    """
    n = len(players)
    total = value(frozenset(players))
    if n == 1:
        return {players[0]: total}
    coalitions = kernel_coalitions(n, budget)
    z = np.zeros((len(coalitions), n))
    for row, c in enumerate(coalitions):
        z[row, list(c)] = 1.0
    y = np.array([value(frozenset(players[i] for i in c)) for c in coalitions])
    w = np.array(list(coalitions.values()))
    # Lagrangian of min sum w (y - z phi)^2 subject to sum phi = total.
    system = np.zeros((n + 1, n + 1))
    system[:n, :n] = 2 * z.T @ (w[:, None] * z)
    system[:n, n] = system[n, :n] = 1.0
    rhs = np.append(2 * z.T @ (w * y), total)
    solution = np.linalg.lstsq(system, rhs, rcond=None)[0]
    return {p: float(solution[i]) for i, p in enumerate(players)}


def sampling_budget(players: int, budget: int) -> int:
    """Coalitions KernelSHAP trains: `budget`, but at least every (n-1)- and 1-player one."""
    return max(budget, 2 * players)


def coalitions_needed(players: Sequence[int], exact_max: int, budget: int) -> list[Coalition]:
    """Every non-empty coalition the Shapley computation of `players` will ask for."""
    if len(players) <= exact_max:
        return [
            frozenset(c)
            for k in range(1, len(players) + 1)
            for c in itertools.combinations(players, k)
        ]
    coalitions = kernel_coalitions(len(players), sampling_budget(len(players), budget))
    return [frozenset(players[i] for i in c) for c in coalitions] + [frozenset(players)]
