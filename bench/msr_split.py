"""Benchmark: coordinated bagging with Data Banzhaf's MSR estimator as the split of a tree
model's pool (issue 35), against the deployed split, both against the expected game.

    python bench/msr_split.py
    python bench/msr_split.py --estimators random_forest_classifier --msr-fits 32 --draws 1

The scenario is the payout bench's (`bench/_scenarios.py`: `scenario(accepted, players,
10 * players + seed, estimator)`): 4 contributions of 1,000 rows, 10,000 accepted rows,
seed 0, the model's `paired_fits` K = 16. It is valued, on the accepted rows and on each
perturbation of `bench/_payout.py` (one accepted row fewer, `--draws` times; reordered;
another catalog seed, where the service sets one):

- `deployed`: `value_batch` with the deployed settings, as the payout bench values it (its
  method is printed: within the coalition row budget the estimator plays every coalition);
- `stand_in`: `value_batch` with a coalition row budget of 0, the split the service uses beyond
  it (`surrogate_exact`), "without" from the deployed valuation (the cache);
- `msr_banzhaf` and `msr_shapley` at each M of `--msr-fits` (`bench/_msr.py`): the first M fits
  of one sequence, so a larger M adds fits to a smaller one's.

Per estimator and method: `faithful_split` (the largest distance of a paid share from the
expected game's split, % of the pool, `bench/_payout_faithfulness.py`, against the stored
reference of `python bench/expected_game.py --estimators ... --accepted 10000 --players 4
--seeds 0`), the reference's floor_split, the largest `share_move` and `pool_move` over the
perturbations (`_payout.moves`, % of the pool), flips, the pool, the plain fits the method
needs ("with" K, "without" cached: MSR M + K) and its wall seconds on the accepted rows (MSR:
its M fits and, unless the kept players' "with" was already fitted, that "with").

`ratio:` = the worst faithful_split of msr_banzhaf at M = 2K over max(5, 1.5 x floor_split).
No `--quick`: the deployed valuation alone is 16 coalitions x K fits; each perturbation is
about 420 fits at the defaults, hence one one-row-fewer draw by default (the payout bench: 4).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from bench import _msr, _payout, _payout_faithfulness, _scenarios
from pipeline.evaluation.fit_engine import FitEngine
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.valuation import BatchValuation, Player, ValuationSettings, value_batch

ESTIMATORS = "random_forest_classifier,hist_gradient_boosting_classifier"
Valued = dict[str, tuple[BatchValuation, float, int]]  # case -> (valuation, seconds, plain fits)


def value_all(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: list[Player],
    settings: ValuationSettings,
    msr_fits: list[int],
) -> Valued:
    """Every method's valuation of the batch on `base`, its wall seconds and plain fits."""
    paired, found = scorer.paired_fits, {}
    started = time.perf_counter()
    deployed = value_batch(scorer, base, players, higher_is_better=True, settings=settings)
    found["deployed"] = (deployed, time.perf_counter() - started, deployed.coalitions * paired)
    withs = {}
    if deployed.with_predictions is not None:
        withs[frozenset(deployed.with_keys)] = deployed.with_predictions
    started = time.perf_counter()
    stand_in = value_batch(
        scorer,
        base,
        players,
        higher_is_better=True,
        settings=ValuationSettings(coalition_row_budget=0, engine=settings.engine),
        without=deployed.without,
    )
    found["stand_in"] = (stand_in, time.perf_counter() - started, stand_in.coalitions * paired)
    if stand_in.with_predictions is not None:
        withs[frozenset(stand_in.with_keys)] = stand_in.with_predictions
    included = _msr.coins(_msr.contribution_keys(players), max(msr_fits))
    scores: list[float] = []
    fitting = 0.0
    for m in sorted(msr_fits):
        started = time.perf_counter()
        fits = range(len(scores), m)
        workers = settings.engine.workers
        scores.extend(_msr.fit_scores(scorer, base, players, included, paired, fits, workers))
        fitting += time.perf_counter() - started
        for method in (_msr.BANZHAF, _msr.SHAPLEY):
            started = time.perf_counter()
            fractions, values = _msr.split(method, included[:m], np.asarray(scores))
            valuation = _msr.as_valuation(
                deployed, scorer, base, players, fractions, values, settings, method, withs
            )
            seconds = fitting + time.perf_counter() - started
            found[f"{method}_m{m}"] = (valuation, seconds, m + paired)
    return found


def measure(
    estimator: str, args: argparse.Namespace, settings: ValuationSettings
) -> tuple[list[str], float | None]:
    """The estimator's case lines and figures, and msr_banzhaf's faithfulness ratio at 2K."""
    seed, players = args.seed, args.players
    scorer, base, contributions = _scenarios.scenario(
        args.accepted, players, 10 * players + seed, estimator
    )
    scorer = _payout.with_paired_fits(scorer, args.fits)
    reference, status = _scenarios.load(estimator, args.accepted, players, seed)
    valued = value_all(scorer, base, contributions, settings, args.msr_fits)
    show(estimator, "base", valued)
    moved: dict[str, list[dict[str, float]]] = {case: [] for case in valued}
    for name, accepted, reseed in _payout.perturbations(scorer, base, args.draws, seed):
        if reseed and not _payout.has_seed(estimator):
            continue  # the owner's trainer draws its own seed: the same valuation again
        with _payout.other_seed(estimator) if reseed else contextlib.nullcontext():
            other = value_all(scorer, accepted, contributions, settings, args.msr_fits)
        show(estimator, name, other)
        for case, (valuation, _, _) in valued.items():
            moved[case].append(_payout.moves(valuation, other[case][0]))
    prefix = f"msr_{estimator}_{args.accepted}_p{players}_s{seed}"
    lines = [f"{prefix}_method_deployed: {valued['deployed'][0].method}"]
    ratio = None
    if reference is None:
        command = _payout_faithfulness.command(estimator, args.accepted, players, seed)
        lines.append(f"{prefix}_faithful: no fresh reference ({status}): {command}")
    else:
        lines.append(f"{prefix}_reference_floor_split_pct_of_pool: {reference.floors()[0]:.2f}")
        lines.append(f"{prefix}_reference_pool_pct: {reference.split().pool:.3f}")
    for case, (valuation, seconds, fits) in valued.items():
        name = f"{prefix}_{case}"
        if reference is not None:
            found = _payout_faithfulness.figures(valuation, reference)
            split, goal = found["faithful_split"], found["split_goal"]
            lines.append(f"{name}_faithful_split_pct_of_pool: {split:.2f} (goal <= {goal:.2f})")
            if case == f"{_msr.BANZHAF}_m{2 * args.fits}":
                ratio = split / goal
        for figure in ("share_move", "pool_move"):
            worst = max(r[figure] for r in moved[case])
            lines.append(f"{name}_max_{figure}_pct_of_pool: {worst:.2f}")
        lines.append(f"{name}_flips: {sum(int(r['flips']) for r in moved[case])}")
        lines.append(f"{name}_pool_pct: {sum(_payout.paid(valuation).values()):.3f}")
        lines.append(f"{name}_plain_fits: {fits}")
        lines.append(f"{name}_seconds: {seconds:.0f}")
    return lines, ratio


def show(estimator: str, perturbation: str, valued: Valued) -> None:
    for case, (valuation, seconds, fits) in valued.items():
        fractions = _payout.fractions(valuation)
        print(
            f"case: {estimator} | {perturbation} | {case} | {valuation.method} | "
            f"{sum(_payout.paid(valuation).values()):.3f} | "
            + " ".join(f"{k}={v:.3f}" for k, v in fractions.items())
            + f" | {fits} | {seconds:.0f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--estimators", default=ESTIMATORS)
    parser.add_argument("--accepted", type=int, default=10_000, help="accepted rows")
    parser.add_argument("--players", type=int, default=4, help="batch size")
    parser.add_argument("--seed", type=int, default=0, help="the payout bench's scenario seed")
    parser.add_argument("--fits", type=int, default=16, help="the model's paired_fits K")
    parser.add_argument("--msr-fits", default="32,64,128", help="MSR's fits M")
    parser.add_argument("--draws", type=int, default=1, help="one-row-fewer draws")
    parser.add_argument("--workers", type=int, default=2, help="fit threads")
    args = parser.parse_args()
    args.msr_fits = sorted(int(m) for m in args.msr_fits.split(","))
    threadpool_limits(1)  # one native thread per fit, as evalscale
    settings = ValuationSettings(engine=FitEngine(workers=args.workers))
    print(f"paired_fits: {args.fits}")
    print(
        "case: estimator | perturbation | method | valuation method | paid pool % | "
        "fractions of the paid pool | plain fits | seconds"
    )
    started, ratios = time.perf_counter(), []
    for estimator in args.estimators.split(","):
        lines, ratio = measure(estimator, args, settings)
        for line in lines:
            print(line, flush=True)
        if ratio is not None:
            ratios.append(ratio)
    print(f"total_wall_seconds: {time.perf_counter() - started:.0f}")
    if ratios:
        print(f"ratio: {max(ratios):.3f}")


if __name__ == "__main__":
    main()
