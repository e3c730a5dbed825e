"""The faithfulness bench at scale (`bench/evalscale.py --parts faithfulness`, its scale cells):
demo churn batches on 10,000 or more accepted rows, the surrogate as deployed against exact
Shapley with the real estimator. The small-data scenarios are in `bench/_faithfulness.py`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from bench._faithfulness import FAMILIES, NOISE_LEVELS, _games, _rows, compared
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import Recipe, as_recipe
from pipeline.rewards.valuation import Player, ValuationSettings


def scale_scenario(
    accepted: int, players: int, seed: int, estimator: str | Recipe = "logistic_regression"
) -> tuple[BenchmarkScorer, pd.DataFrame, list[Player]]:
    """`accepted` demo churn rows without a two-year contract, 10,000 benchmark rows and
    `players` contributions of 1,000 rows drawn like the benchmark, with seeded label noise."""
    rng = np.random.default_rng(seed)
    pool = pd.DataFrame(churn_rows(int(accepted * 1.4) + 1000, seed=seed + 17))
    base = pool[pool["contract"] != "two-year"].iloc[:accepted].reset_index(drop=True)
    contributions = []
    for i in range(players):
        rows = pd.DataFrame(churn_rows(1000, seed=seed * 100 + i + 31))
        noisy = rng.random(len(rows)) < rng.choice(NOISE_LEVELS)
        rows.loc[noisy, "churned"] = rng.permutation(rows["churned"].to_numpy())[: noisy.sum()]
        contributions.append(Player(f"c{i}", rows))
    scorer = BenchmarkScorer(
        pd.DataFrame(churn_rows(10_000, seed=1)),
        task_type="classification",
        estimator=estimator,
        target_column="churned",
        metric_name="accuracy",
    )
    return scorer, base, contributions


def measure_scale(
    accepted_sizes: list[int],
    sizes: list[int],
    seeds: int,
    engine: Any,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    max_base_rows: int = ValuationSettings.surrogate_max_base_rows,
    family: str = "linear",
    first_seed: int = 0,
) -> list[dict[str, Any]]:
    """`measure`'s rows for `scale_scenario`: the surrogate as deployed (its accepted sample
    included) against exact Shapley with the family's classifier (logistic regression by
    default; for the others one row for the stand-in, against one seed's model:
    the floor, its rows in another order, says what that seed moves), with the floor."""
    exact = ValuationSettings(resamples=200, coalition_row_budget=10**12, engine=engine)
    deployed = ValuationSettings(
        resamples=200, coalition_row_budget=0, surrogate_max_base_rows=max_base_rows, engine=engine
    )
    estimator = FAMILIES[family]["classification"]
    games = _games(estimator)
    table = []
    for accepted in accepted_sizes:
        for players in sizes:
            batches = []
            for seed in range(first_seed, first_seed + seeds):
                scenario_ = scale_scenario(accepted, players, 10 * players + seed, estimator)
                found = compared(
                    *scenario_, exact, deployed, seed, higher_is_better=True, games=games
                )
                if found is not None:
                    batches.append(found)
            name = f"churn {accepted:,} accepted"
            rows = _rows(name, as_recipe(estimator).estimator, players, seeds, games, batches)
            for row in rows:
                table.append(row)
                if on_row is not None:
                    on_row(row)
    return table
