"""The surrogate's coalition values computed in bulk (one product of the benchmark rows with
every coalition's coefficients, the metric on label codes or on the matrix of values) are the
estimator's own values, for the label and regression metrics."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest
from sklearn.datasets import load_wine

from pipeline.evaluation.metrics import improvement_denominator
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import Recipe
from pipeline.rewards.surrogate import SurrogateGame
from tests.support.valuation import CANCER, DIABETES, shuffled

# Labels as text: the codes must follow the labels, not their positions.
WINE_NAMES = shuffled(load_wine(as_frame=True).frame).assign(
    target=lambda f: f["target"].map({0: "barolo", 1: "grignolino", 2: "barbera"})
)
TIGHT = {"tol": 1e-10, "max_iter": 10_000}
LOGISTIC = Recipe("logistic_regression", {"C": 0.05, **TIGHT})

CASES: dict[str, tuple[pd.DataFrame, str, str, Recipe]] = {
    "binomial accuracy": (CANCER, "classification", "accuracy", LOGISTIC),
    "binomial f1": (CANCER, "classification", "f1", LOGISTIC),
    "multinomial accuracy": (
        WINE_NAMES,
        "classification",
        "accuracy",
        Recipe("logistic_regression", TIGHT),
    ),
    "multinomial macro f1": (
        WINE_NAMES,
        "classification",
        "f1",
        Recipe("logistic_regression", TIGHT),
    ),
    "rmse": (DIABETES, "regression", "rmse", Recipe("linear_regression")),
    "mae": (DIABETES, "regression", "mae", Recipe("ridge", {"alpha": 3.0})),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bulk_values_are_the_estimators_values(case: str) -> None:
    frame, task, metric, recipe = CASES[case]
    n = len(frame)
    bench, base = frame.iloc[: n // 3], frame.iloc[n // 3 : n // 3 + n // 10]
    rest = frame.iloc[n // 3 + n // 10 :].reset_index(drop=True)
    noisy = rest.iloc[60:130].copy()
    noisy["target"] = noisy["target"].sample(frac=1, random_state=3).to_numpy()
    parts = [rest.iloc[:20], rest.iloc[20:60], noisy]
    scorer = BenchmarkScorer(
        bench, task_type=task, estimator=recipe, target_column="target", metric_name=metric
    )
    higher = metric not in ("rmse", "mae")
    game = SurrogateGame(scorer, base, parts, max_base_rows=10_000, higher_is_better=higher)
    coalitions = [
        frozenset(c) for size in (1, 2, 3) for c in itertools.combinations(range(3), size)
    ]
    game.prepare(coalitions)  # every coalition's value at once
    without = scorer.score(base)
    denominator = improvement_denominator(without, scorer.floor)
    sign = 1.0 if higher else -1.0
    for coalition in coalitions:
        rows = pd.concat([base, *(parts[i] for i in coalition)])
        real = sign * (scorer.score(rows) - without) / denominator * 100.0
        assert game.value(coalition) == pytest.approx(real, abs=1e-4), coalition
