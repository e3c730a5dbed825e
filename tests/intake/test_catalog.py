"""What the catalog says of a dataset version (`pipeline.intake.catalog`), on both backends.

The data-spec as table columns typed as stored; a version's location, content, origin and
standing from one query, for contributions, benchmarks and unknown versions.
"""

from __future__ import annotations

import hashlib

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.demo.churn_data import churn_rows
from pipeline.intake.catalog import model_spec_columns, spec_columns, version_facts
from pipeline.intake.contributions import ROWS_FILENAME
from pipeline.models.definitions import demo_definition
from pipeline.store.objectstore import LocalObjectStore, dataset_key
from tests.support.pipeline import TICKETS, add_benchmark, contribute


def test_spec_columns_follow_the_data_spec_in_order_with_stored_types() -> None:
    columns = spec_columns(demo_definition().data_spec)

    assert [(c.name, c.type, c.required) for c in columns] == [
        ("tenure_months", "int64", True),
        ("monthly_charges", "double", True),
        ("contract", "string", True),
        ("payment_method", "string", False),
        ("support_calls", "int64", True),
        ("has_fiber", "bool", False),
        ("churned", "int64", True),
    ]
    tenure, _, contract, *_ = columns
    assert tenure.constraints == ["minimum 0", "maximum 120"]
    assert tenure.description == "Months the customer has been subscribed."
    assert contract.constraints == ["one of month-to-month, one-year, two-year"]
    comment = spec_columns(TICKETS.data_spec)[1]
    assert (comment.name, comment.constraints) == ("comment", ["at most 500 characters"])


def test_model_spec_columns_read_the_stored_model(db: Database) -> None:
    assert [c.name for c in model_spec_columns(db, 1)][:2] == ["tenure_months", "monthly_charges"]
    assert model_spec_columns(db, 999) == []


def test_version_facts_name_file_origin_and_standing(settings: Settings, db: Database) -> None:
    store = LocalObjectStore(settings.objects_dir)
    spec_id, bench = add_benchmark(db, store, created_by="carol")
    job_id, version = contribute(db, store, churn_rows(120, seed=2), user="alice")

    facts = version_facts(db, 1, [bench, version, "v999"])

    assert set(facts) == {bench, version}
    mine = facts[version]
    assert (mine.kind, mine.job_id, mine.submitter, mine.status) == (
        "contribution",
        job_id,
        "alice",
        "queued",
    )
    assert mine.spec_id is None and not mine.failed_or_rejected
    with store.local_path(dataset_key(1, version, ROWS_FILENAME)) as path:
        assert mine.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert mine.uri == path.as_uri() and mine.size_bytes == path.stat().st_size
    assert mine.file_format == "parquet"
    benchmark = facts[bench]
    assert (benchmark.kind, benchmark.spec_id, benchmark.submitter) == (
        "benchmark",
        spec_id,
        "carol",
    )
    assert benchmark.job_id is None and benchmark.status is None
    assert benchmark.row_count == 300
    assert version_facts(db, 1, []) == {}
