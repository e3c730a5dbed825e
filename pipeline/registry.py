"""Model registry: models defined by a JSON or YAML file, stored with their data-spec."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from pipeline.db import Database
from pipeline.errors import InvalidInput, NotFound
from pipeline.tables import Model
from pipeline.validation import RowValidator, check_schema

DEMO_MODEL_FILE = "customer_churn.json"


class ModelDefinition(BaseModel):
    """What a model file holds."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    task_type: Literal["classification", "regression"]
    target_column: str = Field(min_length=1)
    estimator: str
    data_spec: dict[str, Any]
    example_row: dict[str, Any]


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
    from pipeline.estimators import validate_estimator

    validate_estimator(definition.estimator, definition.task_type)
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


def demo_definition() -> ModelDefinition:
    text = resources.files("pipeline.demo").joinpath(DEMO_MODEL_FILE).read_text()
    return parse_definition(json.loads(text))


def register_model(session: Session, definition: ModelDefinition) -> Model:
    """Add a model, or update the one with the same name (bumping its spec version)."""
    existing = session.scalar(select(Model).where(Model.name == definition.name))
    if existing is not None:
        if existing.data_spec != definition.data_spec:
            existing.spec_version += 1
        for field, value in definition.model_dump().items():
            setattr(existing, field, value)
        session.flush()
        return existing
    model = Model(**definition.model_dump(), spec_version=1, last_version=0)
    session.add(model)
    session.flush()
    return model


MAX_ID = 2**31 - 1


def get_model(session: Session, model_id: int) -> Model:
    # Ids outside the integer column's range cannot exist; some drivers overflow on them.
    model = session.get(Model, model_id) if 1 <= model_id <= MAX_ID else None
    if model is None:
        raise NotFound(f"model {model_id} not found")
    return model


def list_models(session: Session) -> list[Model]:
    return list(session.scalars(select(Model).order_by(Model.id)))


def seed_demo_model(db: Database) -> Model | None:
    """Register the demo model in an empty store; returns it, or None when models exist."""
    with db.session() as session:
        if session.scalar(select(func.count()).select_from(Model)):
            return None
        return register_model(session, demo_definition())


def allocate_version(db: Database, model_id: int) -> tuple[int, str]:
    """Hand out the model's next dataset version number in its own short transaction.

    Versions are monotonic per model; a failed write leaves a gap rather than reusing a
    number whose object may already have been announced to the arrival queue.
    """
    if not 1 <= model_id <= MAX_ID:
        raise NotFound(f"model {model_id} not found")
    with db.session() as session:
        number = session.execute(
            update(Model)
            .where(Model.id == model_id)
            .values(last_version=Model.last_version + 1)
            .returning(Model.last_version)
        ).scalar_one_or_none()
    if number is None:
        raise NotFound(f"model {model_id} not found")
    return number, format_version(number)


def format_version(number: int) -> str:
    return f"v{number}"
