"""How many sampled accepted rows the split of a large batch needs to follow the model (issue 35).

    python bench/sample_split.py
    python bench/sample_split.py --estimator logistic_regression --rows 5000,10000

Beyond the coalition row budget, a batch of up to six is split by the model's own game on a
keyed sample of the accepted rows (`pipeline/rewards/sample_game.py`), when the sample holds at
least `VALUATION_SAMPLE_MIN_ROWS`. This measures that game's split against the model's expected
game on all the accepted rows, the stored reference of `bench/expected_game.py`: for each
sample size, the expected game of the same K fits (`bench/_references.py`) on the sample, its
largest share apart from the reference's, in % of the pool. Then the linear stand-in's split
(the surrogate, `pipeline/rewards/surrogate.py`), as a before.

`ratio:` = the faithful split at the default `VALUATION_SAMPLE_MIN_ROWS` over the goal of 5 % of
the pool (<= 1: the smallest sample the service plays on follows the model).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from threadpoolctl import threadpool_limits

from bench import _payout_faithfulness, _references, _scenarios
from pipeline.rewards.sample_game import keyed_sample
from pipeline.rewards.valuation import ValuationSettings, value_batch

GOAL = 5.0  # % of the pool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--estimator", default="hist_gradient_boosting_classifier")
    parser.add_argument("--accepted", type=int, default=100_000)
    parser.add_argument("--players", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1, help="the payout bench's scenario seed")
    parser.add_argument("--rows", default="2000,5000,10000,20000,45000", help="sample sizes")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    threadpool_limits(1)
    scenario = (args.estimator, args.accepted, args.players, args.seed)
    reference, status = _scenarios.load(*scenario)
    if reference is None:
        sys.exit(
            f"no fresh reference ({status}): python bench/expected_game.py --estimators "
            f"{args.estimator} --accepted {args.accepted} --players {args.players} "
            f"--seeds {args.seed}"
        )
    full = reference.split()
    print(f"scenario: {' | '.join(map(str, scenario))} | K {reference.fits}")
    print(f"reference_fractions: {np.round(full.fractions, 3).tolist()}")
    scorer, base, players = _scenarios.scenario(
        args.accepted, args.players, 10 * args.players + args.seed, args.estimator
    )
    found = {}
    for rows in map(int, args.rows.split(",")):
        started = time.perf_counter()
        sample = keyed_sample(scorer, base, rows)
        scores = _references.coalition_scores(scorer, sample, players, reference.fits, args.workers)
        split = dataclasses.replace(reference, scores=scores).split()
        found[rows] = float(np.max(np.abs(split.fractions - full.fractions))) * 100.0
        print(
            f"sample_{rows}_faithful_split_pct_of_pool: {found[rows]:.2f} "
            f"(fractions {np.round(split.fractions, 3).tolist()}, "
            f"{time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    stand_in = value_batch(
        scorer,
        base,
        players,
        higher_is_better=True,
        settings=ValuationSettings(coalition_row_budget=0),
    )
    fractions = _payout_faithfulness.deployed_fractions(stand_in, reference.keys)
    apart = float(np.max(np.abs(fractions - full.fractions))) * 100.0
    print(f"surrogate_faithful_split_pct_of_pool: {apart:.2f} ({stand_in.method})")
    minimum = ValuationSettings.sample_min_rows
    if minimum not in found:
        sys.exit(f"--rows must hold VALUATION_SAMPLE_MIN_ROWS' default, {minimum}")
    print(f"ratio: {found[minimum] / GOAL:.3f}")


if __name__ == "__main__":
    main()
