"""Estimators a model's recipe may name, the recipe itself, and the pipeline built from it.

A *recipe* is an estimator name from `CATALOG`, the owner's parameters for it (checked at
registration by `pipeline.models.recipe_checks`) and the preprocessing in front of it
(`pipeline.models.preprocessing`). Every fit is deterministic: each estimator's seed and thread
count are fixed by the catalog (`fixed`, which an owner cannot change), so the same data always
yields the same model, and so the same score and reward. Forests draw their bootstrap from the
rows' content (`pipeline.models.keyed_forest`), not from their positions.

HistGradientBoosting turns early stopping on by itself above 10,000 rows, holding out a
validation split of the training rows: the "with" and "without" fits of a valuation would then
stop at different iteration counts for a reason that is not the contribution. The catalog turns
it off (`defaults`); an owner who sets `early_stopping` keeps their choice (the split is still
seeded).

scikit-learn (over a second to import) and LightGBM are imported only when a pipeline is built,
and pandas only when one runs: the API and the CLI import this module to validate model
definitions, which must not pay for either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, Literal, get_args

from pipeline.core.errors import InvalidInput
from pipeline.models.paired_fits import fit_seed
from pipeline.models.preprocessing import build_preprocessor
from pipeline.models.threads import THREADS

if TYPE_CHECKING:
    from sklearn.pipeline import Pipeline

TaskType = Literal["classification", "regression"]
TASK_TYPES: tuple[TaskType, ...] = get_args(TaskType)

RANDOM_STATE = 0
DEFAULT_TEXT_FEATURES = 1000


@dataclass(frozen=True)
class EstimatorKind:
    """One catalog entry: where the class is, and the parameters the marketplace sets."""

    task: TaskType
    cls: str  # "module:Class"
    fixed: Mapping[str, Any] = field(default_factory=dict)  # the owner cannot change these
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the owner may override these
    dense: bool = False  # refuses sparse input: the preprocessing hands it a dense matrix
    neighbours: bool = False  # n_neighbors is capped at the training rows
    openmp: bool = False  # threads only through OpenMP: limited around each fit and prediction
    keyed: bool = False  # its fit takes `row_keys` (pipeline.models.keyed_forest)

    def load(self) -> type[Any]:
        module, name = self.cls.split(":")
        loaded: type[Any] = getattr(import_module(module), name)
        return loaded


_SEEDED = {"random_state": RANDOM_STATE}
_LIGHTGBM = {
    "random_state": RANDOM_STATE,
    "n_jobs": THREADS,
    "deterministic": True,
    "force_row_wise": True,
    "verbose": -1,
}

CATALOG: dict[str, EstimatorKind] = {
    # The default 100 iterations do not always converge on unscaled one-hot mixes.
    "logistic_regression": EstimatorKind(
        "classification", "sklearn.linear_model:LogisticRegression", _SEEDED, {"max_iter": 1000}
    ),
    "random_forest_classifier": EstimatorKind(
        "classification",
        "pipeline.models.keyed_forest:KeyedRandomForestClassifier",
        {**_SEEDED, "n_jobs": THREADS},
        keyed=True,
    ),
    "gradient_boosting_classifier": EstimatorKind(
        "classification", "sklearn.ensemble:GradientBoostingClassifier", _SEEDED
    ),
    "hist_gradient_boosting_classifier": EstimatorKind(
        "classification",
        "sklearn.ensemble:HistGradientBoostingClassifier",
        _SEEDED,
        {"early_stopping": False},
        dense=True,
        openmp=True,
    ),
    "lightgbm_classifier": EstimatorKind("classification", "lightgbm:LGBMClassifier", _LIGHTGBM),
    "knn_classifier": EstimatorKind(
        "classification",
        "sklearn.neighbors:KNeighborsClassifier",
        {"n_jobs": THREADS},
        neighbours=True,
    ),
    # LinearRegression has no randomness, so no random_state to fix.
    "linear_regression": EstimatorKind(
        "regression", "sklearn.linear_model:LinearRegression", {"n_jobs": THREADS}
    ),
    "ridge": EstimatorKind("regression", "sklearn.linear_model:Ridge", _SEEDED),
    "random_forest_regressor": EstimatorKind(
        "regression",
        "pipeline.models.keyed_forest:KeyedRandomForestRegressor",
        {**_SEEDED, "n_jobs": THREADS},
        keyed=True,
    ),
    "hist_gradient_boosting_regressor": EstimatorKind(
        "regression",
        "sklearn.ensemble:HistGradientBoostingRegressor",
        _SEEDED,
        {"early_stopping": False},
        dense=True,
        openmp=True,
    ),
    "lightgbm_regressor": EstimatorKind("regression", "lightgbm:LGBMRegressor", _LIGHTGBM),
    "knn_regressor": EstimatorKind(
        "regression",
        "sklearn.neighbors:KNeighborsRegressor",
        {"n_jobs": THREADS},
        neighbours=True,
    ),
}

ESTIMATORS: dict[str, tuple[TaskType, ...]] = {name: (kind.task,) for name, kind in CATALOG.items()}


@dataclass(frozen=True)
class Preprocessing:
    """The preprocessing part of a recipe (see `pipeline.models.preprocessing`)."""

    text_columns: tuple[str, ...] = ()
    text_max_features: int = DEFAULT_TEXT_FEATURES


@dataclass(frozen=True)
class Recipe:
    """An estimator, the owner's parameters for it, and the preprocessing in front of it."""

    estimator: str
    params: Mapping[str, Any] = field(default_factory=dict)
    preprocessing: Preprocessing = Preprocessing()

    def to_json(self) -> dict[str, Any]:
        return {
            "estimator": {"name": self.estimator, "params": dict(self.params)},
            "preprocessing": {
                "text_columns": list(self.preprocessing.text_columns),
                "text_max_features": self.preprocessing.text_max_features,
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recipe:
        estimator = data["estimator"]
        pre = data.get("preprocessing") or {}
        return cls(
            str(estimator["name"]),
            dict(estimator.get("params") or {}),
            Preprocessing(
                tuple(pre.get("text_columns") or ()),
                int(pre.get("text_max_features") or DEFAULT_TEXT_FEATURES),
            ),
        )

    def describe(self) -> str:
        """The recipe in one line, for the CLI and logs."""
        params = ", ".join(f"{k}={v!r}" for k, v in sorted(self.params.items()))
        text = self.preprocessing.text_columns
        return f"{self.estimator}({params})" + (f", TF-IDF on {', '.join(text)}" if text else "")


def as_recipe(value: str | Recipe) -> Recipe:
    """A recipe; a plain estimator name is the recipe of that estimator with no parameters."""
    return value if isinstance(value, Recipe) else Recipe(value)


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
    if name not in CATALOG:
        raise InvalidInput(
            f"unknown estimator {name!r}; expected one of {', '.join(sorted(CATALOG))}"
        )
    if task_type != CATALOG[name].task:
        raise InvalidInput(
            f"estimator {name!r} is for {CATALOG[name].task}, "
            f"not {task_type}; {task_type} estimators: "
            f"{', '.join(n for n, kind in CATALOG.items() if kind.task == task_type)}"
        )


def estimator_params(
    recipe: Recipe, rows: int | None = None, fit: int | None = None
) -> dict[str, Any]:
    """The estimator's parameters: catalog defaults, the owner's, then the fixed ones.

    With `rows` (the training rows), a neighbours estimator asks for at most that many
    neighbours, so a small training frame is not an error. With `fit` (a paired fit's index,
    `pipeline.models.paired_fits`), a seeded estimator takes that fit's own seed.
    """
    kind = CATALOG[recipe.estimator]
    params = {**kind.defaults, **recipe.params, **kind.fixed}
    if kind.neighbours and rows is not None:
        params["n_neighbors"] = max(1, min(int(params.get("n_neighbors", 5)), rows))
    if fit is not None and "random_state" in params:
        params["random_state"] = fit_seed(int(params["random_state"]), fit)
    return params


def build_estimator(
    recipe: str | Recipe, task_type: str, *, rows: int | None = None, fit: int | None = None
) -> Pipeline:
    """A fresh, unfitted pipeline: the recipe's preprocessing followed by its estimator
    (`fit`: the paired fit it is, see `estimator_params`)."""
    recipe = as_recipe(recipe)
    validate_estimator(recipe.estimator, task_type)
    # sklearn lazily: see the module docstring.
    from sklearn.pipeline import Pipeline

    kind = CATALOG[recipe.estimator]
    pre = recipe.preprocessing
    features = build_preprocessor(pre.text_columns, pre.text_max_features, dense=kind.dense)
    model = kind.load()(**estimator_params(recipe, rows, fit))
    if kind.openmp:
        from pipeline.models.single_thread import OneThreadPipeline

        return OneThreadPipeline([("features", features), ("model", model)])
    return Pipeline([("features", features), ("model", model)])
