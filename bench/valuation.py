"""Benchmark: the cost of valuing a batch of contributions, against one with/without evaluation.

    python bench/valuation.py
    python bench/valuation.py --sizes 2,4,8,16 --rows 1000 --bench-rows 10000

Values batches of 2, 4, 8 and 16 contributions of 1,000 rows each against a 10,000-row
benchmark, on top of 1,000 accepted rows, with the demo model's estimator (logistic regression,
accuracy) and the default valuation settings (1,000 bootstrap resamples, exact Shapley up to 6
contributions, KernelSHAP with a budget of 128 models beyond). The baseline is one plain
with/without evaluation of one 1,000-row contribution (two models trained and scored).
Valuation is a computation on data frames with no HTTP in it, so no server is started: both
run in this process on the same data.

Cost is the process's CPU time (all threads), which other load on a shared machine disturbs
far less than wall time; wall seconds are printed beside it. Prints `figure: value` lines
(seconds, models trained, each batch's cost as a ratio to the baseline) and, last,
`ratio: X` = cost(16) / cost(8) (goal ≤ 2.5: at most linear growth).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd

from pipeline.core.config import load_settings
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.comparison import evaluate_contribution
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.valuation import Player, ValuationSettings, value_batch

OPTIONS = {
    "task_type": "classification",
    "estimator": "logistic_regression",
    "target_column": "churned",
    "metric_name": "accuracy",
}


T = TypeVar("T")


def timed(action: Callable[[], T]) -> tuple[float, float, T]:
    """(CPU seconds of this process, all threads; wall seconds; result)."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = action()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def run(sizes: list[int], rows: int, bench_rows: int, repeats: int) -> None:
    bench = pd.DataFrame(churn_rows(bench_rows, seed=1))
    base = pd.DataFrame(churn_rows(rows, seed=2))
    contributions = [pd.DataFrame(churn_rows(rows, seed=100 + i)) for i in range(max(sizes))]
    settings = ValuationSettings.from_settings(load_settings())

    with_without = partial(
        evaluate_contribution,
        base,
        contributions[0],
        bench,
        metric_direction="higher_is_better",
        **OPTIONS,
    )
    with_without()  # warm-up: imports and first-use costs stay out of the figures
    baseline, baseline_wall, _ = min(timed(with_without) for _ in range(max(3, repeats)))
    print(f"benchmark_rows: {bench_rows}")
    print(f"rows_per_contribution: {rows}")
    print(f"accepted_rows: {rows}")
    print(
        f"settings: resamples {settings.resamples}, level {settings.level}, exact up to "
        f"{settings.exact_max_players}, budget {settings.shapley_budget}, "
        f"engine {settings.engine.name}"
    )
    print(f"with_without_cpu_seconds: {baseline:.3f}")
    print(f"with_without_wall_seconds: {baseline_wall:.3f}")
    costs: dict[int, float] = {}
    for size in sizes:
        scorer = BenchmarkScorer(bench, **OPTIONS)
        players = [Player(f"c{i}", contributions[i]) for i in range(size)]
        seconds, wall, valuation = min(
            (
                timed(
                    partial(
                        value_batch, scorer, base, players, higher_is_better=True, settings=settings
                    )
                )
                for _ in range(repeats)
            ),
            key=lambda result: result[0],
        )
        costs[size] = seconds / baseline
        print(f"batch_{size}_cpu_seconds: {seconds:.3f}")
        print(f"batch_{size}_wall_seconds: {wall:.3f}")
        print(f"batch_{size}_models_trained: {valuation.coalitions}")
        print(f"batch_{size}_method: {valuation.method}")
        print(f"batch_{size}_cost_ratio: {costs[size]:.1f}")
    if 8 in costs and 16 in costs:
        print(f"ratio: {costs[16] / costs[8]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="2,4,8,16", help="batch sizes, comma-separated")
    parser.add_argument("--rows", type=int, default=1000, help="rows per contribution")
    parser.add_argument("--bench-rows", type=int, default=10_000, help="benchmark rows")
    parser.add_argument("--repeats", type=int, default=1, help="best of N runs per figure")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    run(sizes, args.rows, args.bench_rows, args.repeats)


if __name__ == "__main__":
    main()
