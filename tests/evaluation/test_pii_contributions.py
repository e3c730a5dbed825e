"""The pipeline's PII check reads every text value of a contributed dataset (spec §8).

Domain level, on SQLite and PostgreSQL: a contribution sent as rows, and external CSV and Parquet
versions dropped into the store, each with its PII where a head sample never looks. MAX_SAMPLE_SIZE
is 2,000 here: a sample of the first 2,000 distinct values (the scan before issue 20) would miss
each case; now it only bounds how many distinct candidates Presidio confirms.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from pipeline.checks.batch import describe_batch, run_pii_scans, run_quality_checks
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import REJECTED, VALIDATING, Contribution, Model
from pipeline.evaluation.claims import claim_batch
from pipeline.models.definitions import ModelDefinition
from pipeline.models.registry import register_model
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import add_external, add_tickets_model, contribute, ticket_rows

NOTES = ModelDefinition(
    name="support-notes",
    description="Predicts whether a support ticket escalates, from two free-text fields.",
    task_type="classification",
    target_column="escalated",
    estimator="logistic_regression",
    data_spec={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "required": ["wait_minutes", "comment", "contact_note", "escalated"],
        "properties": {
            "wait_minutes": {"type": "integer", "minimum": 0},
            "comment": {"type": "string", "maxLength": 500},
            "contact_note": {"type": "string", "maxLength": 500},
            "escalated": {"type": "integer", "enum": [0, 1]},
        },
    },
    example_row={"wait_minutes": 3, "comment": "vpn down", "contact_note": "none", "escalated": 0},
)


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(max_sample_size=2_000)


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Services:
    return Services(settings, db=db, store=store)


def notes_model(db: Database) -> int:
    with db.session() as session:
        existing = session.scalar(select(Model.id).where(Model.name == NOTES.name))
        return int(existing) if existing is not None else register_model(session, NOTES).id


def notes_table(rows: int, tail: list[str]) -> pa.Table:
    """Clean, distinct notes (order numbers, ids, commas); `tail` ends the second text column."""
    comments = [f"ticket {i}, printer jams again, order ORD-{i % 90}" for i in range(rows)]
    contacts = [f"reached the customer, case {i}, callback done" for i in range(rows)]
    contacts[rows - len(tail) :] = tail
    return pa.table(
        {
            "wait_minutes": [i % 240 for i in range(rows)],
            "comment": comments,
            "contact_note": contacts,
            "escalated": [int(i % 240 > 120) for i in range(rows)],
        }
    )


def checked(svc: Services, version: str, model_id: int) -> Contribution:
    """Claim the version and run the checks up to the PII scan; its job afterwards."""
    batch = claim_batch(svc, model_id, version, trigger="arrival", run_id="test-run")
    describe_batch(svc, batch)
    run_quality_checks(svc, batch)
    run_pii_scans(svc, batch)
    with svc.db.session() as session:
        row = session.get(Contribution, batch.items[0].contribution_id)
        assert row is not None
        session.expunge(row)
        return row


def assert_rejected_for(row: Contribution, column: str, *found: str) -> None:
    assert row.status == REJECTED, row.reason
    reason = row.reason or ""
    assert reason.startswith(f"PII scan failed: PII found in 1 column(s): {column}: "), reason
    for entity in found:
        assert entity in reason
    assert "@example" not in reason and "4111" not in reason and "DE89" not in reason
    pii: dict[str, Any] = (row.quality or {})["pii"]
    assert pii["scanned_values"] >= 2 * 6_000 and not pii["sampled"]


def test_a_contribution_with_emails_only_in_its_last_rows_is_rejected(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = add_tickets_model(db)
    rows = ticket_rows(6_000, seed=4)
    for i, record in enumerate(rows[-30:]):
        record["comment"] += f", reach me at user{i}@example.com"
    _, version = contribute(db, store, rows, model_id=model_id)

    row = checked(svc, version, model_id)

    assert row.status == REJECTED
    assert (row.reason or "") == (
        "PII scan failed: PII found in 1 column(s): comment: EMAIL_ADDRESS (30)"
    )


def test_an_external_csv_with_phones_cards_and_ibans_in_quoted_text_of_its_second_column(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = notes_model(db)
    tail = [
        "call me on +1 212-555-0199, evenings",
        "card 4111 1111 1111 1111, expires soon",
        "refund to DE89 3704 0044 0532 0130 00, please",
    ]
    sink = io.BytesIO()
    pacsv.write_csv(notes_table(6_000, tail), sink)
    version = add_external(db, store, sink.getvalue(), model_id=model_id)

    row = checked(svc, version, model_id)

    assert_rejected_for(row, "contact_note", "PHONE_NUMBER (1)", "CREDIT_CARD (1)", "IBAN_CODE (1)")


def test_an_external_parquet_with_pii_only_in_its_last_row_group(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = notes_model(db)
    sink = io.BytesIO()
    table = notes_table(6_000, [f"wrote to ann{i}@example.org, no answer" for i in range(5)])
    pq.write_table(table, sink, row_group_size=1_500)
    payload = sink.getvalue()
    version = add_external(
        db, store, payload, filename="data.parquet", file_format="parquet", model_id=model_id
    )

    row = checked(svc, version, model_id)

    assert_rejected_for(row, "contact_note", "EMAIL_ADDRESS (5)")


def test_a_clean_external_csv_with_order_numbers_passes_the_pii_check(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = notes_model(db)
    tail = [f"order ORD-2024-{i * 3217:06d}, invoice 2024-{i:04d}-77" for i in range(200)]
    sink = io.BytesIO()
    pacsv.write_csv(notes_table(6_000, tail), sink)
    version = add_external(db, store, sink.getvalue(), model_id=model_id)

    row = checked(svc, version, model_id)

    assert row.status == VALIDATING, row.reason
    pii = (row.quality or {})["pii"]
    assert pii["found"] is False and pii["scanned_values"] == 12_000
    assert pii["confirmed_values"] >= 200  # the order numbers reached Presidio and were cleared
