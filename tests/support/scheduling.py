"""Helpers for the schedule, arrival and sensor tests: models, benchmark specs, frozen times."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select

from pipeline.core.db import Database
from pipeline.core.tables import BenchmarkSpec, DatasetVersion, Model
from pipeline.models.definitions import demo_definition
from pipeline.models.registry import ModelOwner, allocate_version, register_model

T0 = datetime(2025, 3, 1, 10, 7, 30, tzinfo=UTC)


def demo_model_id(db: Database) -> int:
    with db.session() as session:
        model_id = session.scalar(select(func.min(Model.id)))
    assert model_id is not None
    return int(model_id)


def add_model(db: Database, name: str, owner_user_id: str | None = None) -> int:
    definition = demo_definition().model_copy(update={"name": name})
    owner = ModelOwner(user_id=owner_user_id) if owner_user_id else None
    with db.session() as session:
        return register_model(session, definition, owner).id


def add_version(db: Database, model_id: int, kind: str = "benchmark") -> str:
    """A dataset version row as an upload would write it (the object itself is not needed)."""
    number, version = allocate_version(db, model_id)
    key = f"datasets/{model_id}/{version}/data.csv"
    with db.session() as session:
        session.add(
            DatasetVersion(
                model_id=model_id,
                version=version,
                version_number=number,
                kind=kind,
                object_key=key,
                uri=f"file:///objects/{key}",
                file_format="csv",
                sha256="0" * 64,
                size_bytes=10,
            )
        )
    return version


def add_benchmark(db: Database, model_id: int) -> str:
    """Give a model a BenchmarkSpec (with its dataset version); returns the spec id."""
    version = add_version(db, model_id)
    with db.session() as session:
        dataset = session.scalar(
            select(DatasetVersion).where(
                DatasetVersion.model_id == model_id, DatasetVersion.version == version
            )
        )
        assert dataset is not None
        spec = BenchmarkSpec(
            model_id=model_id,
            dataset_version_id=dataset.id,
            filename="bench.csv",
            row_count=60,
            columns=["a", "target"],
            target_column="target",
            input_columns=["a"],
        )
        session.add(spec)
        session.flush()
        return spec.id
