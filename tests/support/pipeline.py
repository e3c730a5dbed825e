"""Helpers for the pipeline tests: benchmarks, contributions, manifests and a domain-level run."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy import select

from pipeline.checks.batch import (
    describe_batch,
    run_integrity_checks,
    run_pii_scans,
    run_quality_checks,
)
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import BenchmarkSpec, Contribution, DatasetVersion, Model
from pipeline.demo.churn_data import churn_benchmark_rows, churn_rows
from pipeline.evaluation.batches import Batch
from pipeline.evaluation.claims import claim_batch
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.intake.contributions import ContributionRequest, submit_contribution
from pipeline.models.definitions import ModelDefinition
from pipeline.models.registry import allocate_version, register_model
from pipeline.rewards.batch_scoring import evaluate_batch
from pipeline.rewards.payouts import RewardOutcome, pay_batch
from pipeline.services import Services
from pipeline.store.objectstore import ObjectStore, dataset_key

DEMO_MODEL = 1
WALLET_A = "0x52908400098527886E0F7030069857D2E4169EE7"  # EIP-55 test vector
WALLET_B = "0x8617e340b3d01fa5f11f306f4090fd50e238070d"
WALLET_C = "0xde709f2102306220921060314715629080e2fb77"


def manifest(wallet: str = WALLET_A, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "contributor_id": "alice",
        "wallet_address": wallet,
        "data_description": "churn observations from our billing system",
        "data_source": "billing export 2024-05",
        "license": "CC-BY-4.0",
    }
    body.update(fields)
    return body


def frame_bytes(frame: pd.DataFrame, file_format: str) -> bytes:
    if file_format == "csv":
        return frame.to_csv(index=False).encode()
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def add_benchmark(
    db: Database,
    store: ObjectStore,
    rows: list[dict[str, Any]] | None = None,
    *,
    model_id: int = DEMO_MODEL,
    file_format: str = "csv",
    **spec: Any,
) -> tuple[str, str]:
    """Store a benchmark as the model's next version with its BenchmarkSpec; (spec id, version)."""
    frame = pd.DataFrame(rows if rows is not None else churn_benchmark_rows(300))
    number, version = allocate_version(db, model_id)
    filename = f"benchmark.{file_format}"
    stored = store.put_bytes(
        dataset_key(model_id, version, filename), frame_bytes(frame, file_format)
    )
    with db.session() as session:
        dv = DatasetVersion(
            model_id=model_id,
            version=version,
            version_number=number,
            kind="benchmark",
            object_key=stored.key,
            uri=stored.uri,
            file_format=file_format,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            row_count=len(frame),
            columns=list(frame.columns),
        )
        session.add(dv)
        session.flush()
        values = {"target_column": "churned", **spec}
        benchmark = BenchmarkSpec(
            model_id=model_id,
            dataset_version_id=dv.id,
            filename=filename,
            row_count=len(frame),
            columns=list(frame.columns),
            **values,
        )
        session.add(benchmark)
        session.flush()
        return benchmark.id, version


def contribute(
    db: Database,
    store: ObjectStore,
    rows: list[dict[str, Any]] | None = None,
    *,
    model_id: int = DEMO_MODEL,
    user: str = "alice",
    with_manifest: dict[str, Any] | None = None,
    seed: int = 5,
) -> tuple[str, str]:
    """Submit rows through the domain; (job id, version)."""
    job = submit_contribution(
        db,
        store,
        ContributionRequest(
            model_id,
            None,
            rows if rows is not None else churn_rows(200, seed=seed),
            manifest=with_manifest,
        ),
        submitter_id=user,
        local_queue=True,
    )
    with db.session() as session:
        version = session.scalar(
            select(DatasetVersion.version).where(DatasetVersion.id == job.dataset_version_id)
        )
    assert version is not None
    return job.id, version


def add_external(
    db: Database,
    store: ObjectStore,
    payload: bytes,
    *,
    filename: str = "data.csv",
    file_format: str = "csv",
    model_id: int = DEMO_MODEL,
) -> str:
    """A version dropped into the store outside the API (as the arrival sensor records it)."""
    number, version = allocate_version(db, model_id)
    stored = store.put_bytes(dataset_key(model_id, version, filename), payload)
    with db.session() as session:
        session.add(
            DatasetVersion(
                model_id=model_id,
                version=version,
                version_number=number,
                kind="external",
                object_key=stored.key,
                uri=stored.uri,
                file_format=file_format,
                size_bytes=stored.size_bytes,
            )
        )
    return version


TICKETS = ModelDefinition(
    name="support-tickets",
    description="Predicts whether a support ticket escalates.",
    task_type="classification",
    target_column="escalated",
    estimator="logistic_regression",
    data_spec={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "required": ["wait_minutes", "comment", "escalated"],
        "properties": {
            "wait_minutes": {"type": "integer", "minimum": 0},
            "comment": {"type": "string", "maxLength": 500},
            "escalated": {"type": "integer", "enum": [0, 1]},
        },
    },
    example_row={"wait_minutes": 12, "comment": "printer jams", "escalated": 0},
)


def add_tickets_model(db: Database) -> int:
    """A second model with a free-text column, where PII can hide."""
    with db.session() as session:
        existing = session.scalar(select(Model.id).where(Model.name == TICKETS.name))
        if existing is not None:
            return int(existing)
        return register_model(session, TICKETS).id


def ticket_rows(count: int, *, with_emails: bool = False, seed: int = 0) -> list[dict[str, Any]]:
    import random

    rng = random.Random(seed)
    words = ["printer", "login", "vpn", "email", "invoice", "laptop", "screen", "network"]
    rows = []
    for i in range(count):
        wait = rng.randint(0, 240)
        comment = f"{rng.choice(words)} issue number {i}"
        if with_emails and i % 3 == 0:
            comment += f" - reach me at user{i}@example.com"
        rows.append({"wait_minutes": wait, "comment": comment, "escalated": int(wait > 120)})
    return rows


@dataclass
class RunResult:
    batch: Batch
    evaluations: list[EvaluationOutcome]
    rewards: list[RewardOutcome]


def run_pipeline(
    svc: Services, version: str, *, model_id: int = DEMO_MODEL, trigger: str = "arrival"
) -> RunResult:
    """The asset chain without Dagster: claim, read, quality, PII, integrity, evaluate, pay."""
    batch = claim_batch(svc, model_id, version, trigger=trigger, run_id="test-run")
    describe_batch(svc, batch)
    run_quality_checks(svc, batch)
    run_pii_scans(svc, batch)
    run_integrity_checks(svc, batch)
    evaluations = evaluate_batch(svc, batch)
    return RunResult(batch, evaluations, pay_batch(svc, model_id, evaluations))


def job(db: Database, job_id: str) -> Contribution:
    with db.session() as session:
        row = session.get(Contribution, job_id)
        assert row is not None
        return row


def services(settings: Settings, db: Database, store: ObjectStore) -> Services:
    return Services(settings, db=db, store=store)
