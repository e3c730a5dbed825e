"""Shared by bench/evalscale.py: the faithfulness and sensitivity tables (`--parts
faithfulness`, `--parts sensitivity`), one line per cell, then each family's summary lines.

The measuring is in bench/_faithfulness.py, bench/_faithfulness_scale.py and
bench/_sensitivity.py; this prints what they find, in the names the benchmarks table uses.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from bench._faithfulness import FAMILIES, measure
from bench._faithfulness_scale import measure_scale
from bench._sensitivity import measure_sensitivity
from pipeline.evaluation.fit_engine import FitEngine


def faithfulness(args: argparse.Namespace, engine: FitEngine) -> None:
    print(
        "faithfulness: data | estimator | players | paid/scenarios | max error % of pool "
        "| median error | min Spearman | median Spearman | within 5 % | floor max error"
    )

    def show(row: dict[str, Any]) -> None:
        print(
            f"faithfulness: {row['data']} | {row['estimator']} | {row['players']} | "
            f"{row['paid']}/{row['scenarios']} | {row['max_error']:.1f} | "
            f"{row['median_error']:.1f} | {row['min_spearman']:.2f} | "
            f"{row['median_spearman']:.2f} | {row['within_5pct']}/{row['paid']} | "
            f"{row['floor_max_error']:.1f}"
        )

    for family in args.families:
        table = measure(
            FAMILIES[family],
            [2, 4, 6],
            args.seeds,
            engine,
            args.datasets,
            show,
            args.first_seed,
        )
        # A tree estimator's rows are named for the game that split the pool
        # ("random_forest_classifier, stand-in"): each name gets its own summary.
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in table:
            _, _, surrogate = row["estimator"].partition(", ")
            groups.setdefault(f"{family}_{surrogate}" if surrogate else family, []).append(row)
        for name, rows in groups.items():
            if name.endswith("_-"):
                continue  # a forest's cells that paid no batch
            summarise(name.replace(" ", "").replace(",", "_"), rows)

    if args.scale_accepted:
        accepted = [int(s) for s in args.scale_accepted.split(",")]
        for family in args.scale_families:
            table = measure_scale(
                accepted,
                [2, 4, 6],
                args.scale_seeds,
                engine,
                show,
                family=family,
                first_seed=args.first_seed,
            )
            if family == "linear":
                summarise("scale", table)  # the name it always had
                continue
            for surrogate in dict.fromkeys(r["estimator"].partition(", ")[2] for r in table):
                rows = [r for r in table if r["estimator"].endswith(f", {surrogate}")]
                summarise(f"scale_{family}_{surrogate}", rows)


def sensitivity(args: argparse.Namespace, engine: FitEngine) -> None:
    print("sensitivity: data | estimator | players | seed | pool % | move % of pool | Spearman")

    def show(row: dict[str, Any]) -> None:
        print(
            f"sensitivity: {row['data']} | {row['estimator']} | {row['players']} | "
            f"{row['seed']} | {row['pool_pct']:.2f} | {row['move']:.1f} | {row['spearman']:.2f}"
        )

    accepted = [int(s) for s in args.sensitivity_accepted.split(",")]
    players = [int(s) for s in args.sensitivity_players.split(",")]
    found = measure_sensitivity(
        args.sensitivity_families, accepted, players, args.seeds, engine, show, args.first_seed
    )
    for family, rows in found.items():
        for size in dict.fromkeys(r["accepted"] for r in rows):
            cell = [r for r in rows if r["accepted"] == size]
            moves = [r["move"] for r in cell]
            rhos = [r["spearman"] for r in cell if not math.isnan(r["spearman"])]
            name = f"sensitivity_{family}_{size or 'small'}"
            print(f"{name}_max_move_pct_of_pool: {max(moves):.1f}")
            print(f"{name}_median_move_pct_of_pool: {float(np.median(moves)):.1f}")
            print(f"{name}_min_spearman: {min(rhos, default=math.nan):.2f}")
            beyond = sum(m > 5.0 for m in moves)
            print(f"{name}_paid_batches_moved_beyond_5pct: {beyond}/{len(moves)}")


def summarise(name: str, table: list[dict[str, Any]]) -> None:
    errors = [r["max_error"] for r in table if not math.isnan(r["max_error"])]
    spearman = [r["min_spearman"] for r in table if not math.isnan(r["min_spearman"])]
    worst, lowest = max(errors, default=math.nan), min(spearman, default=math.nan)
    met = "yes" if worst <= 5.0 and lowest >= 0.9 else "no"
    beyond = sum(r["beyond_floor"] for r in table)
    paid = sum(r["paid"] for r in table)
    print(f"faithfulness_{name}_max_error_pct_of_pool: {worst:.1f}")
    print(f"faithfulness_{name}_min_spearman: {lowest:.2f}")
    print(f"faithfulness_{name}_goal_met (max error <= 5 %, Spearman >= 0.9): {met}")
    print(f"faithfulness_{name}_paid_batches_beyond_5pct_and_floor: {beyond}/{paid}")
