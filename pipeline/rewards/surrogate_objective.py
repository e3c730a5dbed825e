"""Which penalised loss the surrogate game's coalition fits minimise
(`pipeline.rewards.surrogate_fits`): the model's own estimator's objective when it is linear
(linear regression, ridge, logistic regression with its own parameters), else the stand-in,
an L2 logistic or ridge regression at `STAND_IN_PENALTY` on the model's features.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.models.estimators import Recipe, estimator_params

# The penalty of the stand-in objective for estimators that are not linear (forests,
# boosting, neighbours, the owner's code), on standardised features.
STAND_IN_PENALTY = 1.0
# Logistic regression without a penalty diverges on separable data: a floor, far below C=1's.
MIN_LOGISTIC_PENALTY = 1e-6


@dataclass(frozen=True)
class Objective:
    """The penalised loss the surrogate minimises. `exact`: it is the model's own estimator's
    objective (scikit-learn's linear and logistic regressions, ridge), so the surrogate's
    coalition fits are that estimator's fits."""

    penalty: float
    exact: bool


def objective_for(recipe: Recipe | None, task_type: str) -> Objective:
    """The estimator's own objective when it is linear, else the stand-in (an L2 logistic or
    ridge regression at `STAND_IN_PENALTY`)."""
    if recipe is None:
        return Objective(STAND_IN_PENALTY, False)
    params = estimator_params(recipe)
    if recipe.estimator == "linear_regression":
        return Objective(0.0, bool(params.get("fit_intercept", True)))
    if recipe.estimator == "ridge":
        # An array of alphas (one per target) has no single-target meaning here.
        alpha = params.get("alpha", 1.0)
        scalar = isinstance(alpha, int | float)
        plain = scalar and params.get("fit_intercept", True)
        return Objective(float(alpha) if scalar else STAND_IN_PENALTY, bool(plain))
    if recipe.estimator == "logistic_regression":
        c = float(params.get("C", 1.0))
        unpenalised = ("penalty" in params and params["penalty"] is None) or math.isinf(c)
        exact = (
            not params.get("l1_ratio")
            and params.get("penalty", "l2") in ("l2", "deprecated", None)
            and params.get("class_weight") is None
            and params.get("fit_intercept", True)
            and params.get("solver", "lbfgs") != "liblinear"
        )
        penalty = MIN_LOGISTIC_PENALTY if unpenalised else max(1.0 / c, MIN_LOGISTIC_PENALTY)
        return Objective(penalty, bool(exact))
    return Objective(STAND_IN_PENALTY, False)
