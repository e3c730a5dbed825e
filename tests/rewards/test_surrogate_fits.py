"""The surrogate game is the estimator's own game when the estimator is linear (issue 18's
faithfulness): every coalition's surrogate fit scores on the benchmark as the estimator trained
on that coalition's rows does, with the estimator's own parameters."""

from __future__ import annotations

import itertools
from typing import Any

import pandas as pd
import pytest
from sklearn.datasets import load_wine

from pipeline.evaluation.metrics import improvement_denominator
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import Recipe
from pipeline.rewards.surrogate import SurrogateGame
from pipeline.rewards.surrogate_fits import STAND_IN_PENALTY, objective_for
from tests.support.valuation import CANCER, DIABETES, shuffled

WINE = shuffled(load_wine(as_frame=True).frame)
# lbfgs stops at tol 1e-4 by default; the surrogate solves to convergence, so the reference
# here converges too (the bench measures the default, bench/_faithfulness.py).
TIGHT = {"tol": 1e-10, "max_iter": 10_000}

CASES: dict[str, tuple[pd.DataFrame, str, str, Recipe]] = {
    "linear regression": (DIABETES, "regression", "r2", Recipe("linear_regression")),
    "ridge": (DIABETES, "regression", "r2", Recipe("ridge", {"alpha": 30.0})),
    "binomial logistic": (
        CANCER,
        "classification",
        "roc_auc",
        Recipe("logistic_regression", {"C": 0.05, **TIGHT}),
    ),
    "multinomial logistic": (
        WINE,
        "classification",
        "roc_auc",
        Recipe("logistic_regression", TIGHT),
    ),
}


def _cut(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[pd.DataFrame]]:
    """Benchmark, accepted rows and three contributions of different sizes, one noisy."""
    n = len(frame)
    bench, base = frame.iloc[: n // 3], frame.iloc[n // 3 : n // 3 + n // 10]
    rest = frame.iloc[n // 3 + n // 10 :].reset_index(drop=True)
    a, b, c = rest.iloc[:20], rest.iloc[20:60], rest.iloc[60:130].copy()
    c["target"] = c["target"].sample(frac=1, random_state=3).to_numpy()
    return bench, base, [a, b, c]


@pytest.mark.parametrize("case", list(CASES))
def test_the_surrogate_of_a_linear_estimator_is_its_own_game(case: str) -> None:
    frame, task, metric, recipe = CASES[case]
    bench, base, parts = _cut(frame)
    scorer = BenchmarkScorer(
        bench, task_type=task, estimator=recipe, target_column="target", metric_name=metric
    )
    game = SurrogateGame(scorer, base, parts, max_base_rows=10_000, higher_is_better=True)
    assert objective_for(recipe, task).exact
    without = scorer.score(base)
    assert game.score_without == pytest.approx(without, abs=1e-6)
    denominator = improvement_denominator(without, scorer.floor)
    for size in (1, 2, 3):
        for coalition in itertools.combinations(range(3), size):
            rows = pd.concat([base, *(parts[i] for i in coalition)])
            real = (scorer.score(rows) - without) / denominator * 100.0
            assert game.value(frozenset(coalition)) == pytest.approx(real, abs=1e-4), coalition


@pytest.mark.parametrize(
    ("recipe", "task", "penalty", "exact"),
    [
        (Recipe("logistic_regression", {"C": 4.0}), "classification", 0.25, True),
        (Recipe("logistic_regression", {"class_weight": "balanced"}), "classification", 1, False),
        (Recipe("ridge", {"alpha": 3.0}), "regression", 3.0, True),
        (Recipe("linear_regression"), "regression", 0.0, True),
        (Recipe("random_forest_classifier"), "classification", STAND_IN_PENALTY, False),
        (None, "regression", STAND_IN_PENALTY, False),
    ],
)
def test_the_surrogate_takes_a_linear_estimators_own_penalty(
    recipe: Recipe | None, task: str, penalty: float, exact: bool
) -> None:
    objective: Any = objective_for(recipe, task)
    assert (objective.penalty, objective.exact) == (pytest.approx(penalty), exact)
