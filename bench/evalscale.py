"""Benchmark: valuing batches on large accepted data, against one plain fit (issue 18).

    python bench/evalscale.py
    python bench/evalscale.py --sizes 10000,100000 --batches 1,8,16 --budget 540

For each accepted size (demo churn rows, 10,000 / 100,000 / 1,000,000) and estimator (logistic
regression, random forest, HistGradientBoosting), in this process, on the same data:

- one plain fit: the estimator trained on the accepted rows plus one 1,000-row contribution and
  scored on the benchmark (the least any evaluation needs once "without" is known);
- a batch of 1 with a cold cache ("without" trained too), then batches of 1, 8 and 16
  contributions of 1,000 rows with the cache warm (`value_batch` with the stored "without").

Each line gives CPU seconds (this process, all threads) and wall seconds, models trained, the
cache hit or miss, the share method and the cost as a ratio to the plain fit.

Then the faithfulness table (bench/_faithfulness.py): the surrogate's shares against exact
Shapley with the estimator, on real data, batches of 2 to 6. Each cell has a floor: the
estimator against its own perturbed self. `--families linear,boosting,forest` adds
HistGradientBoosting and random forest references, measured with the valuation's linear
stand-in; the forest's reference is its game averaged over seeds (a few minutes more).
`--first-seed` picks the scenarios' seeds (both tables). Then the same at scale
(`--scale-accepted`, `measure_scale`): 10,000 and 100,000 accepted demo churn rows,
contributions of 1,000 rows, the surrogate as deployed with its accepted sample.
`--scale-families` adds HistGradientBoosting and a one-seed forest. Per family (and stand-in;
`scale` for logistic regression at scale) it prints the largest share error in % of the pool,
the lowest Spearman, whether the goal (≤ 5 %, ≥ 0.9) is met, and how many paid batches are
beyond 5 % and the floor.

Every fit and the valuation's own work run on one native thread per fit (BLAS and OpenMP), two
fit threads. Cases whose one fit takes under `REPEAT_BELOW_SECONDS` are measured twice, fit and
batches alike, and the better of the two kept; cases whose fit takes under a second
`TIMES_BELOW_ONE_SECOND` times (the least kept): the fit is every ratio's yardstick. The fit and
the warm batches are timed in turn, one round after another, so both sides of a ratio see the
same machine.

The run must end within `--budget` seconds (default 540, under 10 minutes with start-up). Each
estimator's smallest size runs first; then the case predicted cheapest (its fits, one fit grown
from that estimator's measured fits as rows^k, k from the last two sizes and at least 1). A
case that does not fit in what is left is skipped with the estimator's larger sizes, and their
projections printed instead. Last line: `ratio: X` = the worst over the measured cases of
(batch of 1, warm) / one fit (goal ≤ 1.3) and (batch of 16) / one fit / 3 (goal ≤ 1.0); the
lines before it give each of the two worst figures against its own goal (`cost_batch_1_worst`,
`cost_batch_16_worst`) and `cost_goals_met`.

`--parts payout` (bench/_payout.py, issue 35): the deployed payout again with one accepted row
fewer, the rows reordered and another estimator seed; the largest paid-share move (goal <= 2 %
of the pool), the pool's move (<= 10 %) and flips; `--quick` for 10,000 rows, batches of 2, two
seeds, two draws. Where `python bench/expected_game.py` stored a fresh reference, each
scenario's split and pool are also measured against the expected game (goals max(5, 1.5 x
floor_split) % of the pool and floor_pool). Alone, its `ratio:` is the worst figure over its
goal.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd
from threadpoolctl import threadpool_limits

from bench import _payout
from bench._faithfulness_tables import faithfulness, sensitivity
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.fit_engine import FitEngine
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.valuation import Player, ValuationSettings, value_batch

ROWS = 1000
ESTIMATORS = (
    "logistic_regression",
    "random_forest_classifier",
    "hist_gradient_boosting_classifier",
)
# Cases whose one fit takes less wall time than this are measured twice and the better kept
# (fit and batches alike): on a shared machine a run now and then takes several times longer.
REPEAT_BELOW_SECONDS = 10.0
# Cases whose one fit takes under a second (0.04 s at 10,000 rows) are measured this many times,
# fit and warm batches alike: the least of two moved the printed ratio by ±0.2 on a loaded machine.
TIMES_BELOW_ONE_SECOND = 7
T = TypeVar("T")


def timed(action: Callable[[], T]) -> tuple[float, float, T]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = action()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def churn_frame(count: int, seed: int) -> pd.DataFrame:
    """Demo churn rows; large counts are built from seeded 100,000-row blocks."""
    block = 100_000
    parts = [
        pd.DataFrame(churn_rows(min(block, count - start), seed=seed * 1000 + start // block))
        for start in range(0, count, block)
    ]
    return pd.concat(parts, ignore_index=True)


def run_case(
    size: int, estimator: str, bench: pd.DataFrame, batches: list[int], settings: ValuationSettings
) -> dict[str, float]:
    """Every figure of one (accepted size, estimator); returns the costs as ratios."""
    base = churn_frame(size, seed=2)
    contributions = [pd.DataFrame(churn_rows(ROWS, seed=100 + i)) for i in range(max(batches))]
    scorer = BenchmarkScorer(
        bench,
        task_type="classification",
        estimator=estimator,
        target_column="churned",
        metric_name="accuracy",
    )
    prefix = f"{size}_{estimator}"
    scorer.predict(contributions[0])  # warm-up: first-use costs stay out of the figures
    # Again now that the warm-up has loaded every native library: a limit set before a library
    # is loaded does not reach it (SciPy's own BLAS ran the plain fits with two threads).
    threadpool_limits(1)
    one = pd.concat([base, contributions[0]], ignore_index=True)
    fit_cpu, fit_wall, _ = timed(lambda: scorer.predict(one))
    repeats = 2 if fit_wall < REPEAT_BELOW_SECONDS else 1
    if fit_wall < 1.0:
        repeats = TIMES_BELOW_ONE_SECOND

    def value(count: int, without: Any) -> Any:
        players = [Player(f"c{i}", contributions[i]) for i in range(count)]
        return value_batch(
            scorer, base, players, higher_is_better=True, settings=settings, without=without
        )

    cold_cpu, cold_wall, cold = timed(lambda: value(1, None))
    # The fit and the warm batches are timed in turn, round after round, so that a slow spell
    # of the machine (or the allocator's state after the first rounds) weighs on both sides of
    # every ratio: timed in blocks, the fit's least of seven moved 0.26-0.36 s between runs at
    # 100,000 rows while the batch of one it divides stayed at 0.37 s.
    fits: list[tuple[float, float, Any]] = [(fit_cpu, fit_wall, None)]
    runs: dict[int, list[tuple[float, float, Any]]] = {count: [] for count in batches}
    for round_ in range(repeats):
        if round_:
            fits.append(timed(lambda: scorer.predict(one)))
        for count in batches:
            runs[count].append(timed(partial(value, count, cold.without)))
    fit_cpu, fit_wall, _ = min(fits, key=first)
    print(f"{prefix}_one_fit_cpu_seconds: {fit_cpu:.3f}")
    print(f"{prefix}_one_fit_wall_seconds: {fit_wall:.3f}")
    print(f"{prefix}_measured_times: {repeats} (the least kept, fit and batches in turn)")
    report(f"{prefix}_batch_1_cold", cold_cpu, cold_wall, cold, fit_cpu)
    ratios: dict[str, float] = {"fit_wall": fit_wall}
    for count in batches:
        cpu, wall, warm = min(runs[count], key=first)
        report(f"{prefix}_batch_{count}_warm", cpu, wall, warm, fit_cpu)
        ratios[str(count)] = cpu / fit_cpu
    return ratios


def first(measured: tuple[float, float, Any]) -> float:
    return measured[0]


def report(name: str, cpu: float, wall: float, valuation: Any, fit_cpu: float) -> None:
    print(
        f"{name}: cpu {cpu:.2f} s, wall {wall:.2f} s, models trained {valuation.coalitions}, "
        f"cache {valuation.without_cache}, method {valuation.method}, "
        f"sample rows {valuation.sample_rows}, ratio to one fit {cpu / fit_cpu:.2f}"
    )


def scale(
    args: argparse.Namespace, started: float, settings: ValuationSettings
) -> list[tuple[str, float]]:
    """The cases, cheapest predicted first once each estimator's smallest size is measured, so
    that the budget covers as many as it can; an estimator's larger sizes are only predicted
    (and printed) once one of its sizes does not fit."""
    bench = pd.DataFrame(churn_rows(args.bench_rows, seed=1))
    fits: dict[str, list[tuple[int, float]]] = {e: [] for e in args.estimators}
    pending = {e: list(args.sizes) for e in args.estimators}
    worst: list[tuple[str, float]] = []
    while any(pending.values()):
        cost, estimator = min(
            (case_seconds(fits[e], pending[e][0], len(args.batches))[0], e)
            for e in args.estimators
            if pending[e]
        )
        left = args.budget - (time.perf_counter() - started) - args.faithfulness_seconds
        if cost > left:
            for size in pending[estimator]:
                skipped(size, estimator, fits[estimator], len(args.batches), left)
            pending[estimator] = []
            continue
        size = pending[estimator].pop(0)
        ratios = run_case(size, estimator, bench, args.batches, settings)
        fits[estimator].append((size, ratios["fit_wall"]))
        if "1" in ratios:
            worst.append(("1", ratios["1"]))
        if "16" in ratios:
            worst.append(("16", ratios["16"] / 3))
    return worst


def case_seconds(
    measured: list[tuple[int, float]], size: int, batches: int
) -> tuple[float, int, float, float]:
    """A case's predicted wall seconds, its fits, one fit's seconds and their growth exponent.

    One fit's time is grown from the estimator's measured fits as rows^k (k from the last two
    sizes, at least 1; 1 with one size); a case costs about 2 + 2 + batches fits (one fit
    twice, a cold batch of 1, each warm batch), measured twice below `REPEAT_BELOW_SECONDS`
    (`TIMES_BELOW_ONE_SECOND` times below a second).
    Nothing measured yet: 0 (the case runs, and is the measurement).
    """
    if not measured:
        return 0.0, 0, 0.0, 1.0
    rows, seconds = measured[-1]
    exponent = 1.0
    if len(measured) > 1 and measured[-2][1] > 0:
        (rows_a, seconds_a), (rows_b, seconds_b) = measured[-2:]
        exponent = math.log(seconds_b / seconds_a) / math.log((rows_b + ROWS) / (rows_a + ROWS))
        exponent = max(exponent, 1.0)  # never assume a fit grows slower than its rows
    fit = seconds * ((size + ROWS) / (rows + ROWS)) ** exponent
    count = 2 + 2 + batches if fit >= REPEAT_BELOW_SECONDS else 2 * (2 + batches) + 2
    if fit < 1.0:
        count = TIMES_BELOW_ONE_SECOND * (1 + batches) + 2
    return count * fit, count, fit, exponent


def skipped(
    size: int, estimator: str, measured: list[tuple[int, float]], batches: int, left: float
) -> None:
    """Print the projection of a case the budget cannot hold."""
    cost, count, fit, exponent = case_seconds(measured, size, batches)
    rows, seconds = measured[-1]
    print(
        f"{size}_{estimator}_skipped: predicted {cost:.0f} s wall ({count} fits of about "
        f"{fit:.0f} s: {seconds:.1f} s at {rows} rows grown as rows^{exponent:.2f}), "
        f"{max(left, 0):.0f} s left"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="accepted rows")
    parser.add_argument("--batches", default="1,8,16", help="batch sizes, warm cache")
    parser.add_argument("--bench-rows", type=int, default=10_000, help="benchmark rows")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for the run")
    parser.add_argument("--seeds", type=int, default=3, help="faithfulness scenarios per cell")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="first faithfulness scenario seed (both tables)"
    )
    parser.add_argument(
        "--scale-accepted",
        default="10000,100000",
        help="accepted rows of the faithfulness cells at scale (demo churn; empty: none)",
    )
    parser.add_argument(
        "--scale-seeds", type=int, default=1, help="faithfulness scenarios per cell at scale"
    )
    parser.add_argument(
        "--scale-families",
        default="linear",
        help="reference classifiers at scale: linear,boosting,forest (one seed's forest)",
    )
    parser.add_argument(
        "--faithfulness-seconds",
        type=float,
        default=200.0,
        help="seconds kept for the faithfulness table",
    )
    parser.add_argument("--workers", type=int, default=2, help="fit threads (the machine's cores)")
    parser.add_argument("--parts", default="scale,faithfulness", help="which parts to run")
    parser.add_argument("--datasets", default="", help="faithfulness data sets (default: all)")
    parser.add_argument(
        "--sensitivity-families",
        default="linear,boosting",
        help="reference estimators whose one-row sensitivity `--parts sensitivity` measures",
    )
    parser.add_argument(
        "--sensitivity-accepted",
        default="0,10000",
        help="0: the faithfulness data sets; else accepted demo churn rows at scale",
    )
    parser.add_argument(
        "--sensitivity-players", default="2,4", help="batch sizes of `--parts sensitivity`"
    )
    parser.add_argument(
        "--families",
        default="linear",
        help="faithfulness reference estimators: linear,boosting,forest",
    )
    parser.add_argument("--estimators", default=",".join(ESTIMATORS), help="estimators to time")
    _payout.add_arguments(parser)
    args = parser.parse_args()
    args.sizes = sorted(int(s) for s in args.sizes.split(","))
    args.batches = sorted(int(s) for s in args.batches.split(","))
    args.estimators = args.estimators.split(",")
    args.families = [f for f in args.families.split(",") if f]
    args.sensitivity_families = [f for f in args.sensitivity_families.split(",") if f]
    args.scale_families = args.scale_families.split(",")
    started = time.perf_counter()
    # One native thread per fit: the engine runs fits side by side, and OpenMP threads that
    # spin on a loaded machine would bill their waiting as CPU time (again in `run_case`).
    threadpool_limits(1)
    engine = FitEngine(workers=args.workers)
    settings = ValuationSettings(engine=engine, sample_min_rows=args.sample_min_rows)
    print(f"benchmark_rows: {args.bench_rows}")
    print(f"rows_per_contribution: {ROWS}")
    print(f"engine: {engine.name}")
    parts = args.parts.split(",")
    worst = scale(args, started, settings) if "scale" in parts else []
    if "faithfulness" in parts:
        faithfulness(args, engine)
    if "sensitivity" in parts:
        sensitivity(args, engine)
    payout = _payout.run(args, settings) if "payout" in parts else None
    print(f"total_wall_seconds: {time.perf_counter() - started:.0f}")
    if worst:
        # The two goals differ (1.3 and 1.0), so the single `ratio:` alone does not say
        # whether both are met.
        met = True
        for batch, goal in (("1", 1.3), ("16", 1.0)):
            figures = [value for kind, value in worst if kind == batch]
            if figures:
                met = met and round(max(figures), 3) <= goal  # as printed
                print(f"cost_batch_{batch}_worst: {max(figures):.3f} (goal <= {goal})")
        print(f"cost_goals_met: {'yes' if met else 'no'}")
        print(f"ratio: {max(value for _, value in worst):.3f}")
    elif payout is not None:
        print(f"ratio: {payout:.3f}")


if __name__ == "__main__":
    main()
