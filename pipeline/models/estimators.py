"""Baseline estimators a model definition may name, and the preprocessing pipeline around them.

Every estimator is wrapped in the same tabular preprocessing, chosen from the training frame's
dtypes when the pipeline is fitted:

- numeric columns: median imputation, then standard scaling;
- every other column (strings, booleans, categoricals): most-frequent imputation, then one-hot
  encoding that ignores categories unseen in training.

scikit-learn (over a second to import) is imported only when a pipeline is built, and pandas
(~0.3 s) only when one runs: the API and the CLI import this module to validate model
definitions, which must not pay for either.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, get_args

from pipeline.core.errors import InvalidInput

if TYPE_CHECKING:
    import pandas as pd
    from sklearn.pipeline import Pipeline

TaskType = Literal["classification", "regression"]
TASK_TYPES: tuple[TaskType, ...] = get_args(TaskType)

# Fixed so that the same data always yields the same model, and so the same score and reward.
RANDOM_STATE = 0

# One-hot columns per categorical feature are capped: an ID-like string column would otherwise
# add one column per row; the rarest categories share one "infrequent" column instead.
MAX_CATEGORIES = 50

ESTIMATORS: dict[str, tuple[TaskType, ...]] = {
    "logistic_regression": ("classification",),
    "random_forest_classifier": ("classification",),
    "gradient_boosting_classifier": ("classification",),
    "linear_regression": ("regression",),
    "ridge": ("regression",),
    "random_forest_regressor": ("regression",),
}

# What the label check (`pipeline.checks.labels`) trains for a model with the owner's training
# code: cross-validating the owner's code would cost one sandboxed run per fold.
CHECK_ESTIMATORS: dict[TaskType, str] = {
    "classification": "random_forest_classifier",
    "regression": "random_forest_regressor",
}


def check_estimator(task_type: str, estimator: str | None) -> str:
    """The estimator the label check trains: the model's own, else `CHECK_ESTIMATORS`'."""
    return estimator or CHECK_ESTIMATORS[validate_task_type(task_type)]


def validate_task_type(task_type: str) -> TaskType:
    if task_type not in TASK_TYPES:
        raise InvalidInput(
            f"unknown task_type {task_type!r}; expected one of {', '.join(TASK_TYPES)}"
        )
    return task_type


def validate_estimator(name: str, task_type: str) -> None:
    """Reject an estimator name that is not listed, or that does not fit the task type."""
    validate_task_type(task_type)
    if name not in ESTIMATORS:
        raise InvalidInput(
            f"unknown estimator {name!r}; expected one of {', '.join(sorted(ESTIMATORS))}"
        )
    if task_type not in ESTIMATORS[name]:
        raise InvalidInput(
            f"estimator {name!r} is for {' or '.join(ESTIMATORS[name])}, "
            f"not {task_type}; {task_type} estimators: "
            f"{', '.join(n for n, tasks in ESTIMATORS.items() if task_type in tasks)}"
        )


def build_estimator(name: str, task_type: str) -> Pipeline:
    """A fresh, unfitted pipeline: preprocessing followed by the named estimator."""
    validate_estimator(name, task_type)
    # sklearn lazily: see the module docstring.
    from sklearn.pipeline import Pipeline

    return Pipeline([("features", _preprocessor()), ("model", _model(name))])


def _model(name: str) -> Any:
    # sklearn lazily: see the module docstring.
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge

    factories: dict[str, Any] = {
        # The default 100 iterations do not always converge on unscaled one-hot mixes.
        "logistic_regression": lambda: LogisticRegression(max_iter=1000, random_state=RANDOM_STATE),
        "random_forest_classifier": lambda: RandomForestClassifier(random_state=RANDOM_STATE),
        "gradient_boosting_classifier": lambda: GradientBoostingClassifier(
            random_state=RANDOM_STATE
        ),
        # LinearRegression has no randomness, so no random_state to fix.
        "linear_regression": LinearRegression,
        "ridge": lambda: Ridge(random_state=RANDOM_STATE),
        "random_forest_regressor": lambda: RandomForestRegressor(random_state=RANDOM_STATE),
    }
    return factories[name]()


def _preprocessor() -> Any:
    # sklearn lazily: see the module docstring.
    from sklearn.compose import ColumnTransformer, make_column_selector
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

    numeric = Pipeline(
        [
            ("coerce", FunctionTransformer(_as_floats)),
            ("impute", SimpleImputer(strategy="median")),
            ("scale", StandardScaler()),
        ]
    )
    categorical = Pipeline(
        [
            ("coerce", FunctionTransformer(_as_category_strings)),
            ("impute", SimpleImputer(strategy="most_frequent")),
            (
                "encode",
                OneHotEncoder(handle_unknown="ignore", max_categories=MAX_CATEGORIES),
            ),
        ]
    )
    # Callable selectors are resolved against the frame passed to `fit` and remembered, so the
    # benchmark is transformed with the training frame's column split whatever its own dtypes.
    return ColumnTransformer(
        [
            ("numeric", numeric, make_column_selector(dtype_include="number")),
            ("categorical", categorical, make_column_selector(dtype_exclude="number")),
        ]
    )


def _as_floats(frame: pd.DataFrame) -> pd.DataFrame:
    """Numeric columns as float64: nullable integers' NA and stray text become NaN."""
    import pandas as pd  # lazily: see the module docstring

    return pd.DataFrame(frame).apply(pd.to_numeric, errors="coerce").astype("float64")


def _as_category_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """Categorical columns as text, missing values as NaN.

    Text keeps columns that mix value types (True and "yes", 1 and "1") sortable for the
    encoder, and turns pandas' NA variants into the NaN the imputer recognises.
    """
    import pandas as pd  # lazily: see the module docstring

    na, nat = pd.NA, pd.NaT

    def text(value: Any) -> Any:
        if value is None or value is na or value is nat:
            return math.nan
        if isinstance(value, float) and math.isnan(value):
            return math.nan
        return str(value)

    return pd.DataFrame(frame).astype(object).map(text)
