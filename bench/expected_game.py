"""Benchmark references: the expected game of issue 35, computed once and kept beside the bench.

    python bench/expected_game.py --quick
    python bench/expected_game.py --estimators logistic_regression --accepted 100000

For each scenario of the payout bench (`python bench/evalscale.py --parts payout`: estimator,
accepted rows, batch size, seed), every coalition's benchmark score over K fits, each on its own
keyed 90 % subsample of the accepted rows (`bench/_references.py` says exactly what is computed).
Each reference is written to `bench/references/` as JSON, named by its scenario and K, with a
digest of the code that made it. A scenario whose reference is there and fresh (same code) is
skipped. Two fit threads, one native thread per fit.

Per scenario: its seconds, the pool (% improvement), floor_split (how far the splits of two
halves of the K fits are apart, % of the pool) and floor_pool (how far their pools are, % of the
pool), each the mean over many halvings. Then `floor_split_mean` and `ratio:` =
floor_split_mean / 5, the faithfulness goal's 5 % of the pool: the share of that goal the
reference's own noise takes (<= 1: a split within the goal can be told from the reference's
noise; the payout bench's goal is max(5, 1.5 x floor)).

`--quick`: the payout bench's quick slice (10,000 accepted rows, batches of 2, seeds 0 and 1,
logistic regression, random forest and HistGradientBoosting). `--estimators loan_trainer`: the
loan demo's own train.py in the sandbox, on the loan scenario (`bench/_scenarios.py`).

Not `bench/_expected_game.py`, the faithfulness part's forest-only reference (seed blocks).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from threadpoolctl import threadpool_limits

from bench import _references, _scenarios

ESTIMATORS = "logistic_regression,random_forest_classifier,hist_gradient_boosting_classifier"
SPLIT_GOAL = 5.0  # % of the pool: the faithfulness goal, before the floor widens it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--estimators", default=ESTIMATORS)
    parser.add_argument("--accepted", default="10000,100000", help="accepted rows")
    parser.add_argument("--players", default="2,4,6", help="batch sizes")
    parser.add_argument("--seeds", default="0,1,2,3", help="the payout bench's scenario seeds")
    parser.add_argument("--fits", type=int, default=_references.FITS, help="K, even, >= 16")
    parser.add_argument("--workers", type=int, default=2, help="fit threads")
    parser.add_argument("--quick", action="store_true", help="the payout bench's quick slice")
    args = parser.parse_args()
    if args.quick:
        args.estimators, args.accepted, args.players, args.seeds = ESTIMATORS, "10000", "2", "0,1"
    if args.fits < _references.FITS or args.fits % 2:
        parser.error(f"--fits must be even (two halves) and at least {_references.FITS}")
    threadpool_limits(1)
    digest = _references.code_digest()
    print(f"references: {_references.DIRECTORY.relative_to(_references.ROOT)}")
    print(f"code: {digest[:16]}")
    print(f"fits: {args.fits}")
    print(
        "reference: estimator | accepted | players | seed | seconds | pool % | "
        "floor_split % of pool | floor_pool % of pool | status"
    )
    started, floors = time.perf_counter(), []
    for estimator in args.estimators.split(","):
        for accepted in map(int, args.accepted.split(",")):
            for players in map(int, args.players.split(",")):
                for seed in map(int, args.seeds.split(",")):
                    found, status = _scenarios.load(estimator, accepted, players, seed)
                    if found is None or found.fits < args.fits:
                        found = _scenarios.compute(
                            estimator, accepted, players, seed, args.fits, args.workers
                        )
                        _references.save(found)
                        status = "computed" if status == "missing" else f"computed ({status})"
                    floor_split, floor_pool = found.floors()
                    floors.append(floor_split)
                    print(
                        f"reference: {estimator} | {accepted} | {players} | {seed} | "
                        f"{found.seconds:.0f} | {found.split().pool:.3f} | {floor_split:.2f} | "
                        f"{floor_pool:.2f} | {status}",
                        flush=True,
                    )
    mean = sum(floors) / len(floors)
    print(f"floor_split_max_pct_of_pool: {max(floors):.2f}")
    print(f"floor_split_mean_pct_of_pool: {mean:.2f}")
    print(f"total_wall_seconds: {time.perf_counter() - started:.0f}")
    print(f"ratio: {mean / SPLIT_GOAL:.3f}")


if __name__ == "__main__":
    main()
