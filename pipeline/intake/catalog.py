"""What a data catalog shows of a dataset version: where it is, what it holds, who sent it, and
where it stands.

`version_facts` reads the stored version with its contribution job or BenchmarkSpec in one
query; `spec_columns` describes the model's data-spec as table columns (types as stored in
Parquet, see `pipeline.intake.parquet_rows.arrow_schema_for`).

This module knows nothing of Dagster; `assets/` shows these facts in the UI.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from pipeline.core.db import Database
from pipeline.core.tables import (
    FAILED,
    REJECTED,
    BenchmarkSpec,
    Contribution,
    DatasetVersion,
    Model,
)
from pipeline.intake.parquet_rows import arrow_schema_for


@dataclass(frozen=True)
class VersionFacts:
    """One stored dataset version, with its job (contribution, external) or spec (benchmark)."""

    version: str
    kind: str  # contribution | benchmark | external
    uri: str
    file_format: str
    sha256: str | None = None
    size_bytes: int | None = None
    row_count: int | None = None
    job_id: str | None = None
    spec_id: str | None = None
    submitter: str | None = None
    status: str | None = None  # the job's status; None for a benchmark
    reason: str | None = None
    tokens: float | None = None

    @property
    def failed_or_rejected(self) -> bool:
        """The version's job ended without being accepted."""
        return self.status in (REJECTED, FAILED)


def version_facts(db: Database, model_id: int, versions: Iterable[str]) -> dict[str, VersionFacts]:
    """Facts of the model's `versions` that are stored, by version."""
    wanted = sorted(set(versions))
    if not wanted:
        return {}
    with db.session() as session:
        rows = session.execute(
            select(DatasetVersion, Contribution, BenchmarkSpec)
            .outerjoin(Contribution, Contribution.dataset_version_id == DatasetVersion.id)
            .outerjoin(BenchmarkSpec, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(DatasetVersion.model_id == model_id, DatasetVersion.version.in_(wanted))
        ).all()
    facts = {}
    for dv, job, spec in rows:
        facts[dv.version] = VersionFacts(
            version=dv.version,
            kind=dv.kind,
            uri=dv.uri,
            file_format=dv.file_format,
            sha256=dv.sha256,
            size_bytes=dv.size_bytes,
            row_count=dv.row_count,
            job_id=job.id if job else None,
            spec_id=spec.id if spec else None,
            submitter=job.submitter_id if job else (spec.created_by if spec else None),
            status=job.status if job else None,
            reason=job.reason if job else None,
            tokens=job.tokens if job else None,
        )
    return facts


@dataclass(frozen=True)
class SpecColumn:
    """One data-spec property as a table column."""

    name: str
    type: str  # the Arrow type the column is stored as: int64, double, string, bool
    description: str = ""
    required: bool = False
    constraints: list[str] = field(default_factory=list)


# JSON Schema keywords worth showing beside a column, in words.
_CONSTRAINTS = {
    "minimum": "minimum {}",
    "maximum": "maximum {}",
    "exclusiveMinimum": "greater than {}",
    "exclusiveMaximum": "less than {}",
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "pattern": "matches {}",
    "format": "format {}",
}


def spec_columns(data_spec: dict[str, Any]) -> list[SpecColumn]:
    """The data-spec's properties in declaration order, typed as stored."""
    properties: dict[str, Any] = data_spec.get("properties", {})
    required = set(data_spec.get("required", []))
    columns = []
    for arrow_field in arrow_schema_for(data_spec):
        prop = properties.get(arrow_field.name) or {}
        constraints = [
            text.format(prop[keyword]) for keyword, text in _CONSTRAINTS.items() if keyword in prop
        ]
        if "enum" in prop:
            constraints.append("one of " + ", ".join(str(v) for v in prop["enum"]))
        columns.append(
            SpecColumn(
                name=arrow_field.name,
                type=str(arrow_field.type),
                description=str(prop.get("description", "")),
                required=arrow_field.name in required,
                constraints=constraints,
            )
        )
    return columns


def model_spec_columns(db: Database, model_id: int) -> list[SpecColumn]:
    """The columns of the model's data-spec (none when the model is gone)."""
    with db.session() as session:
        model = session.get(Model, model_id)
        return spec_columns(model.data_spec) if model is not None else []
