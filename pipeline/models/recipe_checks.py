"""Checks of a model's recipe at registration, so that no recipe fails at evaluation time.

- The estimator is in the catalog and fits the task type.
- Every parameter is a parameter of the estimator's own constructor (`get_params()`), and not
  one the marketplace fixes (seeds, threads: `EstimatorKind.fixed`).
- Every value has the type and range the estimator accepts: scikit-learn's own
  `_parameter_constraints` (through `_validate_params`) where the estimator declares them;
  otherwise (LightGBM) the type of the constructor's default. Then the whole pipeline is fitted
  on a small seeded frame and predicts it, which catches what only a fit can tell (incompatible
  combinations, out-of-range values LightGBM checks itself).
- Text columns are properties of the data-spec other than the target.

Each problem is an InvalidInput naming the parameter, which `marketplace models add` prints.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from typing import Any

from pipeline.core.errors import InvalidInput
from pipeline.models.estimators import (
    CATALOG,
    Recipe,
    build_estimator,
    estimator_params,
    validate_estimator,
)

# Rows of the trial fit: enough for every class to appear in each cross-validation fold.
TRIAL_ROWS = 60


def check_recipe(
    recipe: Recipe, task_type: str, *, columns: Collection[str], target_column: str
) -> None:
    """InvalidInput naming the first problem of the recipe (see the module docstring)."""
    validate_estimator(recipe.estimator, task_type)
    _check_text_columns(recipe, columns, target_column)
    if not recipe.params:
        return  # the catalog's own settings, tested with the catalog
    kind = CATALOG[recipe.estimator]
    fixed = sorted(set(recipe.params) & set(kind.fixed))
    if fixed:
        raise InvalidInput(
            f"estimator {recipe.estimator!r}: parameter {fixed[0]!r} is set by the marketplace "
            "(seeds and threads are fixed so that every evaluation is reproducible)"
        )
    estimator_class = kind.load()
    allowed = estimator_class().get_params(deep=False)
    unknown = sorted(set(recipe.params) - set(allowed))
    if unknown:
        choices = ", ".join(sorted(set(allowed) - set(kind.fixed)))
        raise InvalidInput(
            f"estimator {recipe.estimator!r} has no parameter {unknown[0]!r}; "
            f"its parameters: {choices}"
        )
    estimator = estimator_class(**estimator_params(recipe))
    if hasattr(estimator, "_parameter_constraints"):
        try:
            estimator._validate_params()
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"estimator {recipe.estimator!r}: {exc}") from None
    else:
        _check_default_types(recipe, allowed)
    _trial_fit(recipe, task_type)


def _check_text_columns(recipe: Recipe, columns: Collection[str], target_column: str) -> None:
    for name in recipe.preprocessing.text_columns:
        if name == target_column:
            raise InvalidInput(f"preprocessing: text column {name!r} is the target column")
        if name not in columns:
            raise InvalidInput(
                f"preprocessing: text column {name!r} is not a property of the data_spec"
            )


def _check_default_types(recipe: Recipe, defaults: dict[str, Any]) -> None:
    """Each value has the type of the constructor's default (any JSON value for a None one)."""
    for name, value in recipe.params.items():
        default = defaults[name]
        if default is None:
            continue
        expected: tuple[type, ...]
        if isinstance(default, bool):
            expected = (bool,)
        elif isinstance(default, int):
            expected = (int,)
        elif isinstance(default, float):
            expected = (int, float)
        else:
            expected = (type(default),)
        if (isinstance(value, bool) and bool not in expected) or not isinstance(value, expected):
            raise InvalidInput(
                f"estimator {recipe.estimator!r}: parameter {name!r} must be "
                f"{' or '.join(t.__name__ for t in expected)}, got {value!r}"
            )


def _trial_fit(recipe: Recipe, task_type: str) -> None:
    """Fit and predict a small seeded frame; InvalidInput with the estimator's own message."""
    import numpy as np  # lazily: see pipeline.models.estimators
    import pandas as pd

    rng = np.random.default_rng(0)
    x = pd.DataFrame(
        {
            "a": rng.normal(size=TRIAL_ROWS),
            "b": rng.normal(size=TRIAL_ROWS),
            "c": rng.choice(["x", "y", "z"], TRIAL_ROWS),
        }
    )
    for name in recipe.preprocessing.text_columns:
        x[name] = rng.choice(["late payment", "new plan", "support call"], TRIAL_ROWS)
    signal = x["a"] + 0.5 * x["b"]
    y = (signal > 0).astype(int).to_numpy() if task_type == "classification" else signal.to_numpy()
    pipeline = build_estimator(recipe, task_type, rows=TRIAL_ROWS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pipeline.fit(x, y)
            pipeline.predict(x)
    except Exception as exc:
        raise InvalidInput(
            f"estimator {recipe.estimator!r} cannot be trained with these parameters: {exc}"
        ) from None
