"""Shared by bench/evalscale.py: how faithful the surrogate's shares are to exact Shapley with the
model's own estimator, on real data (scikit-learn's breast cancer, wine, diabetes; demo churn).

Each scenario is one batch of 2 to 6 contributions on top of accepted data, valued twice by
`value_batch`: with the estimator playing every coalition (exact Shapley, the reference) and with
the surrogate game (`coalition_row_budget=0`). Contributions differ as real ones do: in size
(0.5x to 1x an equal part) and in label noise (none, 10 %, 30 %, or every label replaced),
seeded. Figures per scenario:

- error: the largest difference between the two paid shares (a rejected contribution is paid 0),
  in percent of the reference pool;
- Spearman: rank correlation of the two share vectors (rejected contributions at the value that
  rejected them), NaN when one vector is constant;
- floor: the error between the reference and the estimator's game perturbed without changing
  the model (`perturbed`): what the estimator's own arbitrariness moves.

Reference estimators come by family (`FAMILIES`): linear (logistic regression; linear
regression for diabetes), for which the surrogate is the estimator's own objective;
HistGradientBoosting (`boosting`, deterministic), for which it is a stand-in; and random forest
(30 trees), whose one-seed game is mostly its seed's noise at these sizes: its reference is
exact Shapley of the forest's expected game (averaged over `FOREST_SEEDS` seeds), its floor the
same over other seeds, and the stand-in's split is measured against it (`measure_forest`,
bench/_expected_game.py).

Only batches the reference pays (accepted, pool > 0) count: a share of a batch within noise is
never paid.

`measure_scale` is the same comparison at the sizes the surrogate is deployed for (demo churn,
10,000 and 100,000 accepted rows, contributions of 1,000 rows), the surrogate as deployed (its
sample of the accepted rows, `ValuationSettings` defaults) against exact Shapley with logistic
regression. The accepted rows hold no two-year contract, which the benchmark and the
contributions do: on data drawn like the accepted rows, 1,000 more rows never change the model
beyond noise, so no batch would be paid and nothing compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from bench._expected_game import forest_scenario
from bench._stand_in import StandInGame, playing
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import Recipe, as_recipe
from pipeline.rewards.valuation import BatchValuation, Player, ValuationSettings, value_batch

NOISE_LEVELS = (0.0, 0.0, 0.1, 0.3, 1.0)
# A tree estimator's split is measured with the valuation's linear stand-in, named so that its
# rows say which game split the pool. Other surrogates were measured and lost; the commit that
# keeps them is named in docs/benchmarks.md.
STAND_INS: dict[str, type[Any]] = {"stand-in": StandInGame}
# The valuation's own surrogate, unnamed (linear estimators: it is the estimator's objective).
DEPLOYED: dict[str, type[Any] | None] = {"": None}
# Forests averaged per coalition in a random forest's expected game (bench/_expected_game.py).
FOREST_SEEDS = 8


@dataclass(frozen=True)
class DataSet:
    name: str
    frame: pd.DataFrame
    target: str
    task: str
    metric: str
    estimator: str | Recipe


# The reference estimators, by family: linear (the surrogate is then the estimator's own
# objective) and random forest (smaller than the catalog's 100 trees, for the bench's time).
FAMILIES: dict[str, dict[str, str | Recipe]] = {
    "linear": {"classification": "logistic_regression", "regression": "linear_regression"},
    "forest": {
        "classification": Recipe("random_forest_classifier", {"n_estimators": 30}),
        "regression": Recipe("random_forest_regressor", {"n_estimators": 30}),
    },
    # Deterministic (no early stopping in the catalog, no subsampling): its exact game is a
    # reference as it stands, against the stand-in.
    "boosting": {
        "classification": "hist_gradient_boosting_classifier",
        "regression": "hist_gradient_boosting_regressor",
    },
}


def datasets(estimators: dict[str, str | Recipe]) -> list[DataSet]:
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine

    churn = pd.DataFrame(churn_rows(3000, seed=3))
    return [
        DataSet(
            "breast cancer",
            load_breast_cancer(as_frame=True).frame,
            "target",
            "classification",
            "accuracy",
            estimators["classification"],
        ),
        DataSet(
            "wine",
            load_wine(as_frame=True).frame,
            "target",
            "classification",
            "accuracy",
            estimators["classification"],
        ),
        DataSet(
            "diabetes",
            load_diabetes(as_frame=True).frame,
            "target",
            "regression",
            "r2",
            estimators["regression"],
        ),
        DataSet(
            "churn (demo)",
            churn,
            "churned",
            "classification",
            "accuracy",
            estimators["classification"],
        ),
    ]


def scenario(
    data: DataSet, players: int, seed: int
) -> tuple[BenchmarkScorer, pd.DataFrame, list[Player]]:
    """Benchmark 30 %, accepted rows 10 %, the rest cut into `players` noisy contributions."""
    rng = np.random.default_rng(seed)
    frame = data.frame.sample(frac=1, random_state=seed).reset_index(drop=True)
    bench_rows, base_rows = int(0.3 * len(frame)), int(0.1 * len(frame))
    bench = frame.iloc[:bench_rows].reset_index(drop=True)
    base = frame.iloc[bench_rows : bench_rows + base_rows].reset_index(drop=True)
    rest = frame.iloc[bench_rows + base_rows :].reset_index(drop=True)
    part = len(rest) // players
    contributions = []
    for i in range(players):
        size = max(10, int(part * rng.uniform(0.5, 1.0)))
        rows = rest.iloc[i * part : i * part + size].copy()
        noisy = rng.random(len(rows)) < rng.choice(NOISE_LEVELS)
        rows.loc[noisy, data.target] = rng.permutation(data.frame[data.target].to_numpy())[
            : noisy.sum()
        ]
        contributions.append(Player(f"c{i}", rows.reset_index(drop=True)))
    scorer = BenchmarkScorer(
        bench,
        task_type=data.task,
        estimator=data.estimator,
        target_column=data.target,
        metric_name=data.metric,
    )
    return scorer, base, contributions


def compare(reference: BatchValuation, surrogate: BatchValuation) -> tuple[float, float]:
    """(largest paid-share difference in % of the reference pool, Spearman of the shares)."""
    keys = sorted(reference.shares)

    def paid(v: BatchValuation, key: str) -> float:
        return v.shares[key] if key in v.accepted else 0.0

    error = max(abs(paid(surrogate, k) - paid(reference, k)) for k in keys)
    a = [reference.shares[k] for k in keys]
    b = [surrogate.shares[k] for k in keys]
    rho = float(spearmanr(a, b).statistic) if len(set(a)) > 1 and len(set(b)) > 1 else math.nan
    return error / reference.pool_pct * 100.0, rho


def perturbed(scorer: BenchmarkScorer, base: pd.DataFrame, players: list[Player], seed: int) -> Any:
    """The same game with the estimator's own arbitrariness changed, not the model: logistic
    regression converged tighter (lbfgs stops at tol 1e-4), other estimators given their rows in
    another order (a forest's bootstrap draws depend on it). Its distance to the reference is
    the floor no split of the estimator's game can beat."""
    recipe = as_recipe(scorer.recipe) if scorer.recipe else None
    if recipe is not None and recipe.estimator == "logistic_regression":
        tight = Recipe(recipe.estimator, {**recipe.params, "tol": 1e-8}, recipe.preprocessing)
        again = BenchmarkScorer(
            scorer.bench,
            task_type=scorer.task_type,
            estimator=tight,
            target_column=scorer.target_column,
            metric_name=scorer.metric.name,
        )
        return again, base, players
    rng = np.random.default_rng(seed)

    def shuffled(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.iloc[rng.permutation(len(frame))].reset_index(drop=True)

    return scorer, shuffled(base), [Player(p.key, shuffled(p.frame)) for p in players]


def measure_forest(
    estimators: dict[str, str | Recipe],
    sizes: list[int],
    seeds: int,
    only: str = "",
    on_row: Callable[[dict[str, Any]], None] | None = None,
    first_seed: int = 0,
) -> list[dict[str, Any]]:
    """`measure` for a random forest: the reference is exact Shapley of the forest's expected
    game over `FOREST_SEEDS` seeds, the floor the same over as many other seeds
    (bench/_expected_game.py); one row per (data set, batch size, game)."""
    table = []
    for data in datasets(estimators):
        if only and data.name not in only.split(","):
            continue
        for players in sizes:
            found: dict[str, list[tuple[float, float]]] = {}
            for seed in range(first_seed, first_seed + seeds):
                scorer, base, contributions = scenario(data, players, 1000 * players + seed)
                hib = data.metric != "rmse"
                measured = forest_scenario(scorer, base, contributions, FOREST_SEEDS, hib)
                for name, figures in (measured or {}).items():
                    found.setdefault(name, []).append(figures)
            floors = [e for e, _ in found.pop("floor", [])]
            for name in found or ["-"]:
                errors = [e for e, _ in found.get(name, [])]
                rhos = [r for _, r in found.get(name, [])]
                table.append(
                    _row(
                        data.name,
                        f"{as_recipe(data.estimator).estimator}, {name}",
                        players,
                        seeds,
                        errors,
                        rhos,
                        floors,
                    )
                )
                if on_row is not None:
                    on_row(table[-1])
    return table


def compared(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    contributions: list[Player],
    exact: ValuationSettings,
    cheap: ValuationSettings,
    seed: int,
    *,
    higher_is_better: bool,
    games: Mapping[str, type[Any] | None] = DEPLOYED,
) -> tuple[dict[str, tuple[float, float]], float] | None:
    """Each surrogate's (share error % of pool, Spearman) and the floor's error for one batch,
    or None when the reference pays nothing: the surrogates (`cheap`, the valuation's own for
    a None game, else `games[name]`) and the perturbed estimator against exact Shapley."""
    options: dict[str, Any] = {"higher_is_better": higher_is_better}
    reference = value_batch(scorer, base, contributions, settings=exact, **options)
    if not reference.accepted or reference.pool_pct <= 0:
        return None
    found = {}
    for name, game in games.items():
        with playing(game) if game is not None else nullcontext():
            surrogate = value_batch(
                scorer, base, contributions, settings=cheap, without=reference.without, **options
            )
        found[name] = compare(reference, surrogate)
    again = perturbed(scorer, base, contributions, seed)
    floor = compare(reference, value_batch(*again, settings=exact, **options))[0]
    return found, floor


def _games(estimator: str | Recipe) -> Mapping[str, type[Any] | None]:
    """The valuation's own surrogate for a linear estimator (its objective), else the
    stand-in (`STAND_INS`)."""
    if as_recipe(estimator).estimator in ("logistic_regression", "linear_regression"):
        return DEPLOYED
    return STAND_INS


def _rows(
    data: str,
    estimator: str,
    players: int,
    seeds: int,
    games: Mapping[str, Any],
    batches: list[tuple[dict[str, tuple[float, float]], float]],
) -> list[dict[str, Any]]:
    """One `_row` per game of the paid `batches` (`compared`), named "estimator, game"."""
    floors = [floor for _, floor in batches]
    return [
        _row(
            data,
            f"{estimator}, {name}" if name else estimator,
            players,
            seeds,
            [found[name][0] for found, _ in batches],
            [found[name][1] for found, _ in batches],
            floors,
        )
        for name in games
    ]


def _row(
    data: str,
    estimator: str,
    players: int,
    seeds: int,
    errors: list[float],
    rhos: list[float],
    floors: list[float],
) -> dict[str, Any]:
    return {
        "data": data,
        "estimator": estimator,
        "players": players,
        "paid": len(errors),
        "scenarios": seeds,
        "max_error": _summary(errors, max),
        "median_error": _summary(errors, np.median),
        "min_spearman": _summary(rhos, min),
        "median_spearman": _summary(rhos, np.median),
        "within_5pct": sum(e <= 5.0 for e in errors),
        "floor_max_error": _summary(floors, max),
        # Beyond 5 % and beyond what the estimator's own arbitrariness moves.
        "beyond_floor": sum(e > 5.0 and e > f for e, f in zip(errors, floors, strict=True)),
    }


def _summary(values: list[float], worst: Callable[[list[float]], float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return float(worst(kept)) if kept else math.nan


def measure(
    estimators: dict[str, str | Recipe],
    sizes: list[int],
    seeds: int,
    engine: Any,
    only: str = "",
    on_row: Callable[[dict[str, Any]], None] | None = None,
    first_seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per (data set, batch size): scenarios paid, worst and median error, Spearman,
    and the floor (the reference against its perturbed self, `perturbed`). For estimators
    the valuation gives a stand-in (not linear), one row named for it (`STAND_INS`); a
    random forest's rows come from `measure_forest` instead.

    `only`: comma-separated data set names (default: all); `on_row` sees each row when done;
    the scenarios' seeds are `first_seed` to `first_seed + seeds - 1`."""
    if as_recipe(estimators["classification"]).estimator.startswith("random_forest"):
        return measure_forest(estimators, sizes, seeds, only, on_row, first_seed)
    exact = ValuationSettings(resamples=200, coalition_row_budget=10**12, engine=engine)
    cheap = ValuationSettings(resamples=200, coalition_row_budget=0, engine=engine)
    games = _games(estimators["classification"])
    table = []
    for data in datasets(estimators):
        if only and data.name not in only.split(","):
            continue
        for players in sizes:
            batches = []
            for seed in range(first_seed, first_seed + seeds):
                batch = compared(
                    *scenario(data, players, 1000 * players + seed),
                    exact,
                    cheap,
                    seed,
                    higher_is_better=data.metric != "rmse",
                    games=games,
                )
                if batch is not None:
                    batches.append(batch)
            estimator = as_recipe(data.estimator).estimator
            for row in _rows(data.name, estimator, players, seeds, games, batches):
                table.append(row)
                if on_row is not None:
                    on_row(row)
    return table
