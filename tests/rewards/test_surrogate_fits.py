"""The surrogate game is the estimator's own game when the estimator is linear (issue 18's
faithfulness): every coalition's surrogate fit scores on the benchmark as the estimator trained
on that coalition's rows does, with the estimator's own parameters."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_wine

from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.metrics import improvement_denominator
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import Recipe
from pipeline.rewards import anchored_passes, surrogate_fits
from pipeline.rewards.surrogate import SurrogateGame
from pipeline.rewards.surrogate_fits import coalition_fits
from pipeline.rewards.surrogate_objective import STAND_IN_PENALTY, objective_for
from tests.support.valuation import CANCER, DIABETES, shuffled

WINE = shuffled(load_wine(as_frame=True).frame)
# Numbers and categories (one-hot columns: their sum per feature is the intercept's column).
CHURN = pd.DataFrame(churn_rows(600, seed=5)).rename(columns={"churned": "target"})
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
    "binomial logistic, categories": (
        CHURN,
        "classification",
        "roc_auc",
        Recipe("logistic_regression", TIGHT),
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


def test_float32_passes_around_the_full_fit_land_where_float64_passes_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Binomial chord passes in float32 (`anchored_passes.Anchored`) keep float64's precision: every
    coalition's fit is the one float64 passes find, to the solver's tolerance, on data with
    one-hot columns (directions no row sees) and thousands of rows."""
    frame = pd.DataFrame(churn_rows(6000, seed=7)).rename(columns={"churned": "target"})
    frame.loc[frame.index[4000:4500], "target"] = 1 - frame["target"].iloc[4000:4500]  # noisy
    bench, base = frame.iloc[:1000], frame.iloc[1000:3000]
    parts = [frame.iloc[start : start + 500] for start in range(3000, 6000, 500)]
    scorer = BenchmarkScorer(
        bench,
        task_type="classification",
        estimator="logistic_regression",
        target_column="target",
        metric_name="accuracy",
    )
    game = SurrogateGame(scorer, base, parts, max_base_rows=10_000, higher_is_better=True)
    coalitions = [
        [0, *(i + 1 for i in c)]
        for size in range(1, len(parts) + 1)
        for c in itertools.combinations(range(len(parts)), size)
    ]
    pens = np.stack([game._penalty(c) for c in coalitions])

    def fits() -> np.ndarray:
        return np.stack(
            coalition_fits(game.logistic, game.full_fit, game.hessians, coalitions, pens)
        )

    anchored = fits()
    monkeypatch.setattr(anchored_passes.Anchored, "of", classmethod(lambda cls, *args: None))
    plain = fits()
    # Both stop within TOLERANCE of the fit; float32's sums left along the unseen directions
    # (about 5e-5 here) would be beyond.
    assert np.max(np.abs(anchored - plain)) < 2 * surrogate_fits.TOLERANCE
    # Where predictions are concerned (the rows' linear predictors), closer still.
    x = game.x_bench
    eta = np.einsum("nd,cd->cn", x, anchored[:, 0]) - np.einsum("nd,cd->cn", x, plain[:, 0])
    assert np.max(np.abs(eta)) < 10 * surrogate_fits.TOLERANCE


def test_the_binomial_loss_is_logaddexps() -> None:
    eta = np.concatenate([np.linspace(-40.0, 40.0, 100_001), [-700.0, 0.0, 700.0]])
    expected = np.logaddexp(0.0, eta)
    np.testing.assert_allclose(surrogate_fits._softplus(eta), expected, rtol=4e-16, atol=4e-16)
