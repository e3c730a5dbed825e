"""Model definitions: the JSON or YAML file (or folder) an owner registers a model from.

A definition names the model's task, target and data-spec, and either a listed estimator or the
owner's training code. It is checked here, before anything is stored; `pipeline.models.registry`
stores it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from pipeline.core.errors import InvalidInput
from pipeline.core.tables import Model
from pipeline.models.dataspec import RowValidator, check_schema
from pipeline.models.estimators import DEFAULT_TEXT_FEATURES, Preprocessing, Recipe
from pipeline.models.paired_fits import DEFAULT_PAIRED_FITS, MAX_PAIRED_FITS
from pipeline.models.recipe_checks import check_recipe
from pipeline.sandbox.folders import check_entry, definition_file, pack_folder, parse_entry
from pipeline.sandbox.requirements import REQUIREMENTS_FILE, Requirements, folder_requirements

# The demo models' files: package data in pipeline/demo/, read by path (that package sits above
# this one: its generators use rewards' manifests), not imported.
DEMO_DIR = Path(__file__).resolve().parent.parent / "demo"
DEMO_MODEL_FILE = "customer_churn.json"
# The demo models `prepare_store` registers in an empty store, in order (ids 1, 2), as
# `marketplace models add` would: a definition file and an owner's folder (its model.json and
# train.py) in `pipeline/demo`.
DEMO_LOAN_FOLDER = "loan_default"
DEMO_MODELS = (DEMO_MODEL_FILE, DEMO_LOAN_FOLDER)


class EstimatorChoice(BaseModel):
    """`"estimator": {"name": ..., "params": {...}}` (a plain name means no parameters)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    params: dict[str, Any] = Field(default_factory=dict)


class PreprocessingChoice(BaseModel):
    """`"preprocessing"`: how the rows are turned into features (pipeline.models.preprocessing)."""

    model_config = ConfigDict(extra="forbid")

    text_columns: list[str] = Field(default_factory=list)
    text_max_features: int = Field(default=DEFAULT_TEXT_FEATURES, ge=1, le=100_000)


DEFAULT_MIN_IMPROVEMENT_PCT = 0.5


class ModelDefinition(BaseModel):
    """What a model file holds."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    task_type: Literal["classification", "regression"]
    target_column: str = Field(min_length=1)
    # Exactly one: a listed estimator (a name, or a name with parameters), or the owner's training
    # code ("module:function" of the model's folder, run in the sandbox: docs/sandbox.md).
    estimator: str | EstimatorChoice | None = None
    trainer: str | None = Field(default=None, max_length=200)
    preprocessing: PreprocessingChoice = Field(default_factory=lambda: PreprocessingChoice())
    data_spec: dict[str, Any]
    example_row: dict[str, Any]
    # A batch is paid only when the lower bound of its improvement clears this, in percent
    # (docs/rewards.md, "Minimum meaningful improvement").
    min_improvement_pct: float = Field(default=DEFAULT_MIN_IMPROVEMENT_PCT, ge=0.0, le=100.0)
    # K fits of each training frame, the pool their mean (pipeline.models.paired_fits). Strict:
    # true, 2.5 or "4" is refused, not read as a number of fits.
    paired_fits: StrictInt = Field(default=DEFAULT_PAIRED_FITS, ge=1, le=MAX_PAIRED_FITS)

    def recipe(self) -> Recipe:
        """The estimator, its parameters and the preprocessing, as the scorer uses them (a
        definition with a trainer has no recipe: see `table_columns`)."""
        choice = self.estimator
        if choice is None:
            raise InvalidInput("model definition: a model with a trainer has no estimator recipe")
        name, params = (choice, {}) if isinstance(choice, str) else (choice.name, choice.params)
        pre = self.preprocessing
        return Recipe(
            name,
            params,
            Preprocessing(tuple(dict.fromkeys(pre.text_columns)), pre.text_max_features),
        )

    def table_columns(self) -> dict[str, Any]:
        """The Model row's columns: the estimator's name, and the whole recipe as JSON (both None
        for a model with the owner's trainer)."""
        fields = self.model_dump(exclude={"estimator", "preprocessing"})
        if self.trainer is not None:
            return {**fields, "estimator": None, "recipe": None}
        recipe = self.recipe()
        return {**fields, "estimator": recipe.estimator, "recipe": recipe.to_json()}


def model_recipe(model: Model) -> Recipe | None:
    """A registered model's recipe (models registered before recipes: the estimator's name);
    None for a model with the owner's trainer."""
    if model.recipe:
        return Recipe.from_json(model.recipe)
    return Recipe(model.estimator) if model.estimator else None


def parse_definition(data: Any) -> ModelDefinition:
    """Validate a model definition: schema, target column, estimator and example row agree."""
    try:
        definition = ModelDefinition.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"model definition: {where}: {first['msg']}") from None
    check_schema(definition.data_spec)
    if definition.target_column not in definition.data_spec.get("properties", {}):
        raise InvalidInput(
            f"model definition: target_column {definition.target_column!r} "
            "is not a property of the data_spec"
        )
    if (definition.estimator is None) == (definition.trainer is None):
        raise InvalidInput("model definition: give either an estimator or a trainer, not both")
    if definition.trainer is not None:
        parse_entry(definition.trainer)
    else:
        check_recipe(
            definition.recipe(),
            definition.task_type,
            columns=definition.data_spec.get("properties", {}),
            target_column=definition.target_column,
        )
    errors = RowValidator(definition.data_spec).errors_for([definition.example_row])
    if errors:
        problems = "; ".join(f"{e.path}: {e.message}" for e in errors)
        raise InvalidInput(f"model definition: example_row fails its data_spec: {problems}")
    return definition


def load_definition(path: Path) -> ModelDefinition:
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InvalidInput(f"{path}: not valid JSON/YAML: {exc}") from None
    return parse_definition(data)


@dataclass(frozen=True)
class ModelFolder:
    """A model registered from its folder: the definition and the packed training code."""

    definition: ModelDefinition
    archive: bytes | None = None  # None: a definition with an estimator, no code to keep
    sha256: str | None = None
    # Its requirements.txt, checked (pipeline.sandbox.requirements); None: the service's packages.
    requirements: Requirements | None = None


def load_model_folder(folder: Path) -> ModelFolder:
    """A model folder's definition and, for a trainer, its checked and packed code."""
    definition = load_definition(definition_file(folder))
    if definition.trainer is None:
        if (folder / REQUIREMENTS_FILE).exists():
            raise InvalidInput(
                f"{REQUIREMENTS_FILE} is for a model with a trainer (its own code); a listed "
                "estimator runs with the service's packages"
            )
        return ModelFolder(definition, None, None)
    check_entry(folder, definition.trainer)
    requirements = folder_requirements(folder)
    archive, sha256 = pack_folder(folder)
    return ModelFolder(definition, archive, sha256, requirements)


def load_model_path(path: Path) -> ModelFolder:
    """What `marketplace models add FILE_OR_DIR` registers: a folder (`load_model_folder`) or a
    definition file alone."""
    return load_model_folder(path) if path.is_dir() else ModelFolder(load_definition(path))


def demo_model(name: str) -> ModelFolder:
    """A demo model (`DEMO_MODELS`), loaded as `marketplace models add` loads it."""
    return load_model_path(DEMO_DIR / name)


def demo_definition(name: str = DEMO_MODEL_FILE) -> ModelDefinition:
    """A demo model's definition (`DEMO_MODELS`); the first demo model by default."""
    return demo_model(name).definition
