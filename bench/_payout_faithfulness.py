"""Shared by bench/_payout.py: how far the deployed payout is from the expected game of issue 35
(the stored references of `bench/_references.py`, made by `python bench/expected_game.py`).

Per scenario, for its reference valuation (the deployed `value_batch` on the unperturbed rows):

- faithful_split = the largest |deployed fraction - reference fraction| over the players, in %
  of the pool. A deployed fraction is the player's share over the shares of the players the
  split kept (0 for one rejected for its share): the paid share over the paid pool when the pool
  is paid. A batch the significance gate holds back is still compared by the split it made;
  whether it is paid is the stability figures' business. Goal: max(5, 1.5 x floor_split).
- faithful_pool = |deployed pool - reference pool| in % of the reference pool (the pool the
  valuation measured, paid or not). Goal: floor_pool, at least `MIN_POOL_GOAL`, so that a
  reference whose halves happen to agree does not set a goal nothing meets.

A reference pool <= 0 (the expected game pays nothing) has no pool figure; its split figure is
100 when the deployed split keeps anyone. A scenario without a fresh stored reference has no
figure: one line says which command makes it, and the ratio is left to the stability figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench import _references, _scenarios
from pipeline.rewards.valuation import SHARE_REJECTED, BatchValuation

SPLIT_GOAL = 5.0  # % of the pool
FLOOR_FACTOR = 1.5
MIN_POOL_GOAL = 1.0  # % of the pool


def deployed_fractions(valuation: BatchValuation, keys: list[str]) -> np.ndarray:
    """Each player's share of the split's pool (module docstring), in `keys`' order."""
    shares, rejected = valuation.shares, valuation.rejected
    kept = {k: s for k, s in shares.items() if rejected.get(k) != SHARE_REJECTED}
    total = sum(kept.values())
    return np.asarray([kept.get(k, 0.0) / total if total > 0 else 0.0 for k in keys])


def figures(valuation: BatchValuation, reference: _references.Reference) -> dict[str, Any]:
    """faithful_split and faithful_pool with their goals (module docstring)."""
    split = reference.split()
    floor_split, floor_pool = reference.floors()
    fractions = deployed_fractions(valuation, reference.keys)
    faithful_pool = None
    if split.pool > 0:
        faithful_pool = abs(valuation.pool_pct - split.pool) / split.pool * 100.0
    return {
        "faithful_split": float(np.max(np.abs(fractions - split.fractions))) * 100.0,
        "split_goal": max(SPLIT_GOAL, FLOOR_FACTOR * floor_split),
        "faithful_pool": faithful_pool,
        "pool_goal": max(floor_pool, MIN_POOL_GOAL),
        "reference_pool": split.pool,
        "deployed_pool": valuation.pool_pct,
        "fits": reference.fits,
        "fractions": " ".join(
            f"{a:.3f}>{b:.3f}" for a, b in zip(split.fractions, fractions, strict=True)
        ),
    }


def command(estimator: str, accepted: int, players: int, seed: int) -> str:
    return (
        f"python bench/expected_game.py --estimators {estimator} --accepted {accepted} "
        f"--players {players} --seeds {seed}"
    )


def attach(rows: list[dict[str, Any]], valuation: BatchValuation) -> None:
    """Compare a scenario's reference valuation with its stored reference, print the case's
    line and put the figures (None without a fresh reference) in each of its `rows`."""
    if not rows:
        return
    first = rows[0]
    scenario = (first["estimator"], first["accepted"], first["players"], first["seed"])
    reference, status = _scenarios.load(*scenario)
    found = None if reference is None else figures(valuation, reference)
    for row in rows:
        row["faithful"] = found
    name = " | ".join(map(str, scenario))
    if found is None:
        print(f"payout_faithful: {name} | no fresh reference ({status}): {command(*scenario)}")
        return
    pool = found["faithful_pool"]
    print(
        f"payout_faithful: {name} | K {found['fits']} | split {found['faithful_split']:.2f} "
        f"(goal <= {found['split_goal']:.2f}) | pool {found['deployed_pool']:.3f} vs "
        f"{found['reference_pool']:.3f}: "
        + ("-" if pool is None else f"{pool:.2f}")
        + f" (goal <= {found['pool_goal']:.2f}) | fractions reference>deployed "
        f"{found['fractions']}",
        flush=True,
    )


def summary(rows: list[dict[str, Any]]) -> tuple[list[str], float]:
    """Per estimator and accepted size: the worst faithful_split and faithful_pool against
    their goals, and the ratio (the worst figure over its goal; 0 without references)."""
    lines, ratio = [], 0.0
    scenarios: dict[tuple[Any, ...], dict[str, Any] | None] = {}
    for r in rows:
        key = (r["estimator"], r["accepted"], r["players"], r["seed"])
        scenarios.setdefault(key, r.get("faithful"))
    for estimator, accepted in dict.fromkeys((e, a) for e, a, _, _ in scenarios):
        name = f"payout_{estimator}_{accepted}"
        cell = {key: f for key, f in scenarios.items() if key[:2] == (estimator, accepted)}
        found = [f for f in cell.values() if f is not None]
        if not found:
            lines.append(
                f"{name}_faithful: no fresh reference; make them with python bench/expected_game.py"
            )
            continue
        for figure, goal in (("faithful_split", "split_goal"), ("faithful_pool", "pool_goal")):
            measured = [f for f in found if f[figure] is not None]
            if not measured:
                continue
            worst = max(measured, key=lambda f: f[figure] / f[goal])
            lines.append(
                f"{name}_{figure}_pct_of_pool: {worst[figure]:.2f} (goal <= {worst[goal]:.2f})"
            )
            ratio = max(ratio, worst[figure] / worst[goal])
        if len(found) < len(cell):
            lines.append(f"{name}_faithful_scenarios: {len(found)} of {len(cell)} with a reference")
    return lines, ratio
