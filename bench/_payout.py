"""Shared by bench/evalscale.py (`--parts payout`): how far the deployed payout moves with what
no supplier controls (issue 35).

Each scenario is `scale_scenario` (demo churn without two-year contracts, `players`
contributions of 1,000 rows with seeded label noise, a 10,000-row benchmark), or for
`loan_trainer` the loan demo's owner trainer on its own such scenario (`bench/_scenarios.py`),
valued as the service values it (`value_batch` with the deployed settings). Then again:

- with one accepted row fewer (`draws` rows, drawn with a fixed seed),
- with the accepted rows reordered,
- with another seed of the estimator (its catalog `random_state`, which an owner cannot set;
  not for the owner's trainer, which draws its own).

Per perturbation: the largest move of a paid share in % of the reference pool (a rejected
contribution is paid 0), the move of the paid pool in % of it, and the flips: contributions
holding at least `FLIP_SHARE` of the pool that change between paid and rejected.

`--payout-fits K` sets the model's `paired_fits` to K, as an owner would
(`pipeline.models.paired_fits`): each coalition is fitted K times on keyed subsamples and the
game played on their stacked predictions (the expected game at small K); the pool's band over
the K fits is printed beside each reference valuation.

`--sample-min-rows N` sets `VALUATION_SAMPLE_MIN_ROWS`: a huge N gives the surrogate the batches
beyond the row budget that the model splits on a sample (`pipeline.rewards.sample_game`).

Faithfulness (`bench/_payout_faithfulness.py`): each scenario's reference valuation against the
expected game stored by `python bench/expected_game.py`, when a fresh one is there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd

from bench import _payout_faithfulness
from bench._scenarios import scenario
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models import estimators
from pipeline.rewards.valuation import BatchValuation, Player, ValuationSettings, value_batch

FLIP_SHARE = 0.05
OTHER_SEED = 1
GOALS = {"share_move": 2.0, "pool_move": 10.0}  # % of the pool


def with_paired_fits(scorer: BenchmarkScorer, fits: int) -> BenchmarkScorer:
    """`scorer`'s benchmark and model, with the owner's `paired_fits` set to `fits`."""
    return BenchmarkScorer(
        scorer.bench,
        task_type=scorer.task_type,
        estimator=scorer.recipe,
        trainer=scorer.trainer,
        target_column=scorer.target_column,
        input_columns=scorer.input_columns,
        metric_name=scorer.metric.name,
        paired_fits=fits,
    )


def has_seed(estimator: str) -> bool:
    """Whether the service sets `estimator`'s seed (the owner's trainer draws its own)."""
    kind = estimators.CATALOG.get(estimator)
    return kind is not None and "random_state" in kind.fixed


@contextmanager
def other_seed(estimator: str) -> Iterator[None]:
    """The catalog's seed of `estimator` replaced by `OTHER_SEED` (if it has one)."""
    kind = estimators.CATALOG.get(estimator)
    if kind is None or "random_state" not in kind.fixed:
        yield
        return
    fixed = {**kind.fixed, "random_state": OTHER_SEED}
    estimators.CATALOG[estimator] = dataclasses.replace(kind, fixed=fixed)
    try:
        yield
    finally:
        estimators.CATALOG[estimator] = kind


def paid(valuation: BatchValuation) -> dict[str, float]:
    """Each contribution's paid share in % points (0 when rejected or the pool is not paid)."""
    if not valuation.significant:
        return dict.fromkeys(valuation.shares, 0.0)
    return {k: (v if k in valuation.accepted else 0.0) for k, v in valuation.shares.items()}


def fractions(valuation: BatchValuation) -> dict[str, float]:
    """Each contribution's fraction of the paid pool (the split; 0 when rejected or unpaid)."""
    shares = paid(valuation)
    pool = sum(shares.values())
    return {k: (v / pool if pool > 0 else 0.0) for k, v in shares.items()}


def moves(reference: BatchValuation, other: BatchValuation) -> dict[str, float]:
    """How far `other` is from `reference`, in % of the reference's paid pool:

    - `share_move`: the largest move of a contribution's fraction of the paid pool (the split);
    - `pool_move`: the paid pool's move;
    - `tokens_move`: the largest move of a paid share in tokens, which is both of the above;
    - `flips`: contributions holding at least `FLIP_SHARE` of the pool that change between paid
      and rejected.

    The issue's goals are 2 % for a share and 10 % for the pool. A pool may move 10 %, which
    moves a share holding half of it by 5 % in tokens: the share goal can only be the split's.
    """
    first, second = paid(reference), paid(other)
    # An unpaid reference whose perturbation pays: measured against the pool that was paid.
    pool = sum(first.values()) or sum(second.values())
    if pool <= 0:
        return {"share_move": 0.0, "pool_move": 0.0, "tokens_move": 0.0, "flips": 0}
    split_a, split_b = fractions(reference), fractions(other)
    big = [k for k in first if max(first[k], second[k]) >= FLIP_SHARE * pool]
    return {
        "share_move": max(abs(split_b[k] - split_a[k]) for k in first) * 100.0,
        "pool_move": abs(sum(second.values()) - sum(first.values())) / pool * 100.0,
        "tokens_move": max(abs(second[k] - first[k]) for k in first) / pool * 100.0,
        "flips": sum((first[k] > 0) != (second[k] > 0) for k in big),
    }


def perturbations(
    scorer: BenchmarkScorer, base: pd.DataFrame, draws: int, seed: int
) -> Iterator[tuple[str, pd.DataFrame, bool]]:
    """(name, accepted rows, another seed?) of each perturbation."""
    rng = np.random.default_rng(seed * 31 + 5)
    for draw in range(draws):
        left_out = int(rng.integers(len(base)))
        yield f"row-{draw}", base.drop(index=base.index[left_out]).reset_index(drop=True), False
    yield "reordered", base.sample(frac=1, random_state=seed + 3).reset_index(drop=True), False
    yield "seed", base, True


def measure_payout(
    estimator_names: list[str],
    accepted_sizes: list[int],
    sizes: list[int],
    seeds: list[int],
    draws: int,
    settings: ValuationSettings,
    on_row: Callable[[dict[str, Any]], None],
    fits: int = 1,
) -> list[dict[str, Any]]:
    """One row per scenario and perturbation (module docstring)."""
    rows = []
    for estimator in estimator_names:
        for accepted in accepted_sizes:
            for players in sizes:
                for seed in seeds:
                    scorer, base, contributions = scenario(
                        accepted, players, 10 * players + seed, estimator
                    )
                    if fits > 1:
                        scorer = with_paired_fits(scorer, fits)
                    rows.extend(
                        _case(scorer, base, contributions, estimator, seed, draws, settings, on_row)
                    )
    return rows


def _case(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    contributions: list[Player],
    estimator: str,
    seed: int,
    draws: int,
    settings: ValuationSettings,
    on_row: Callable[[dict[str, Any]], None],
) -> list[dict[str, Any]]:
    def value(accepted: pd.DataFrame) -> BatchValuation:
        return value_batch(
            scorer, accepted, contributions, higher_is_better=True, settings=settings
        )

    reference = value(base)
    found = []
    for name, accepted, reseed in perturbations(scorer, base, draws, seed):
        if reseed and not has_seed(estimator):
            continue  # the same valuation again
        if reseed:
            with other_seed(estimator):
                other = value(accepted)
        else:
            other = value(accepted)
        moved = moves(reference, other)
        row = {
            "estimator": estimator,
            "accepted": len(base),
            "players": len(contributions),
            "seed": seed,
            "method": reference.method,
            "pool_pct": sum(paid(reference).values()),
            "perturbation": name,
            "other_pool_pct": sum(paid(other).values()),
            **moved,
            "band": reference.stability.describe() if reference.stability else "",
            "shares": " ".join(
                f"{a:.3f}>{b:.3f}"
                for a, b in zip(paid(reference).values(), paid(other).values(), strict=True)
            ),
        }
        found.append(row)
        on_row(row)
    _payout_faithfulness.attach(found, reference)
    return found


def fits_for_goals(worst: dict[str, float], fits: int) -> int:
    """The paired fits at which the worst moves would meet their goals, if they shrink as one
    over the square root of the fits (the moves of a mean of K independent fits' pools do)."""
    scale = max(worst[figure] / goal for figure, goal in GOALS.items())
    return max(1, math.ceil(fits * scale**2))


def summary(rows: list[dict[str, Any]], fits: int = 1) -> tuple[list[str], float]:
    """`figure: value` lines per estimator and accepted size, and the ratio (worst figure over
    its goal; a flip counts as 1 + flips, the goal being none)."""
    lines, ratio = [], 0.0
    cells = dict.fromkeys((r["estimator"], r["accepted"]) for r in rows)
    for estimator, accepted in cells:
        cell = [r for r in rows if (r["estimator"], r["accepted"]) == (estimator, accepted)]
        name = f"payout_{estimator}_{accepted}"
        worst = {figure: max(r[figure] for r in cell) for figure in GOALS}
        for figure, goal in GOALS.items():
            lines.append(f"{name}_max_{figure}_pct_of_pool: {worst[figure]:.2f} (goal <= {goal:g})")
            ratio = max(ratio, worst[figure] / goal)
        tokens = max(r["tokens_move"] for r in cell)
        lines.append(f"{name}_max_tokens_move_pct_of_pool: {tokens:.2f}")
        lines.append(f"{name}_fits_for_goals: {fits_for_goals(worst, fits)} (at 1/sqrt(K))")
        flips = sum(r["flips"] for r in cell)
        lines.append(f"{name}_flips: {flips} (goal 0)")
        if flips:
            ratio = max(ratio, 1.0 + flips)
        for kind in ("row", "reordered", "seed"):
            part = [r for r in cell if r["perturbation"].startswith(kind)]
            if part:
                worst = max(r["share_move"] for r in part)
                lines.append(f"{name}_{kind}_max_share_move_pct_of_pool: {worst:.2f}")
    faithful_lines, faithful_ratio = _payout_faithfulness.summary(rows)
    return lines + faithful_lines, max(ratio, faithful_ratio)


def add_arguments(parser: Any) -> None:
    """evalscale's options of this part."""
    parser.add_argument(
        "--quick", action="store_true", help="`--parts payout`: a smaller slice (10,000 rows)"
    )
    parser.add_argument(
        "--payout-estimators",
        default="logistic_regression,random_forest_classifier,hist_gradient_boosting_classifier",
    )
    parser.add_argument("--payout-accepted", default="10000,100000", help="accepted rows")
    parser.add_argument("--payout-players", default="2,4,6", help="batch sizes")
    parser.add_argument("--payout-seeds", type=int, default=4, help="scenarios per cell")
    parser.add_argument("--payout-draws", type=int, default=4, help="one-row-fewer draws")
    parser.add_argument(
        "--payout-fits", type=int, default=1, help="the model's paired_fits K (1: one fit)"
    )
    parser.add_argument(
        "--sample-min-rows",
        type=int,
        default=ValuationSettings.sample_min_rows,
        help="VALUATION_SAMPLE_MIN_ROWS (a huge value: the surrogate splits what a sample would)",
    )


def run(args: Any, settings: ValuationSettings) -> float:
    """Measure, print every row and the summary lines; the part's ratio."""
    if args.quick:
        args.payout_accepted, args.payout_players = "10000", "2"
        args.payout_seeds, args.payout_draws = 2, 2
    print(
        "payout: estimator | accepted | players | seed | method | pool % | perturbation | "
        "pool % after | largest split move % of pool | pool move % | largest tokens move % | "
        "flips | paid shares"
    )

    def show(r: dict[str, Any]) -> None:
        print(
            f"payout: {r['estimator']} | {r['accepted']} | {r['players']} | {r['seed']} | "
            f"{r['method']} | {r['pool_pct']:.3f} | {r['perturbation']} | "
            f"{r['other_pool_pct']:.3f} | {r['share_move']:.2f} | {r['pool_move']:.2f} | "
            f"{r['tokens_move']:.2f} | {r['flips']} | {r['shares']}"
            + (f" | {r['band']}" if r["band"] else ""),
            flush=True,
        )

    rows = measure_payout(
        args.payout_estimators.split(","),
        [int(s) for s in args.payout_accepted.split(",")],
        [int(s) for s in args.payout_players.split(",")],
        list(range(args.first_seed, args.first_seed + args.payout_seeds)),
        args.payout_draws,
        settings,
        show,
        args.payout_fits,
    )
    print(f"payout_fits: {args.payout_fits}")
    lines, ratio = summary(rows, args.payout_fits)
    for line in lines:
        print(line)
    print(f"payout_ratio: {ratio:.3f}")
    return ratio
