"""Demo data (issue 11): `marketplace demo-data` and the generator behind it (pipeline/demo)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from eth_account import Account

from cli.contribute import load_manifest
from cli.datafiles import read_rows
from cli.upload import model_upload_fields
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput
from pipeline.core.tables import REWARDED
from pipeline.demo.demo_data import (
    DemoData,
    DemoModel,
    demo_wallet,
    make_demo_data,
)
from pipeline.evaluation.comparison import evaluate_contribution
from pipeline.models.dataspec import RowValidator
from pipeline.models.definitions import DEMO_LOAN_FOLDER, demo_definition, demo_model
from pipeline.models.registry import ModelOwner, register_model_folder
from pipeline.rewards.manifests import parse_manifest
from pipeline.sandbox.runs import bwrap_path
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import add_benchmark, contribute, job, run_pipeline


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def churn_model() -> DemoModel:
    d = demo_definition()
    return DemoModel(d.name, d.task_type, d.target_column, d.data_spec)


@pytest.fixture(scope="module")
def churn_demo() -> DemoData:
    return make_demo_data(churn_model())


def features(row: dict[str, Any], target: str) -> tuple[Any, ...]:
    return tuple(sorted((k, v) for k, v in row.items() if k != target))


def bootstrap_lower_bound(correct_with: list[bool], correct_without: list[bool]) -> float:
    """2.5th percentile of the paired bootstrap of the accuracy difference (seeded)."""
    rng = random.Random(0)
    n = len(correct_with)
    diffs = [int(a) - int(b) for a, b in zip(correct_with, correct_without, strict=True)]
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(500))
    return means[int(0.025 * len(means))]


# --- the generator ---------------------------------------------------------------------------


def test_demo_rows_match_the_data_spec_and_are_complete(churn_demo: DemoData) -> None:
    spec = demo_definition().data_spec
    validator = RowValidator(spec)
    assert len(churn_demo.benchmark) == 2000 and len(churn_demo.contribution) == 1000
    assert validator.errors_for(churn_demo.benchmark) == []
    assert validator.errors_for(churn_demo.contribution) == []
    # Every column of the data-spec, optional ones included, in the data-spec's order.
    assert churn_demo.columns == list(spec["properties"])
    assert all(set(row) == set(churn_demo.columns) for row in churn_demo.contribution)


def test_contribution_shares_no_row_with_the_benchmark_and_repeats_none(
    churn_demo: DemoData,
) -> None:
    bench = {features(r, "churned") for r in churn_demo.benchmark}
    given = [features(r, "churned") for r in churn_demo.contribution]
    assert len(set(given)) == len(given)
    assert bench.isdisjoint(given)
    assert len(bench) == len(churn_demo.benchmark)


def test_contribution_improves_a_fresh_model_significantly(churn_demo: DemoData) -> None:
    bench = pd.DataFrame(churn_demo.benchmark)
    result = evaluate_contribution(
        None,
        pd.DataFrame(churn_demo.contribution),
        bench,
        task_type="classification",
        estimator="logistic_regression",
        target_column="churned",
        metric_name="accuracy",
        metric_direction="higher_is_better",
    )
    assert result.improvement_pct > 10
    # Per-row correctness of the trained model and of the majority baseline on the benchmark.
    from pipeline.models.estimators import build_estimator

    train = pd.DataFrame(churn_demo.contribution)
    columns = [c for c in churn_demo.columns if c != "churned"]
    fitted = build_estimator("logistic_regression", "classification")
    fitted.fit(train[columns], train["churned"])
    truth = bench["churned"].tolist()
    predicted = fitted.predict(bench[columns]).tolist()
    majority = bench["churned"].mode()[0]
    lower = bootstrap_lower_bound(
        [p == t for p, t in zip(predicted, truth, strict=True)], [majority == t for t in truth]
    )
    assert lower > 0.05


def test_same_seed_same_rows_other_seed_other_rows() -> None:
    first = make_demo_data(churn_model(), benchmark_rows=60, contribution_rows=100)
    again = make_demo_data(churn_model(), benchmark_rows=60, contribution_rows=100)
    other = make_demo_data(churn_model(), seed=2, benchmark_rows=60, contribution_rows=100)
    assert first == again
    assert other.contribution != first.contribution
    assert other.manifest["wallet_address"] == first.manifest["wallet_address"] == demo_wallet()


def test_demo_manifest_is_valid(churn_demo: DemoData) -> None:
    manifest = parse_manifest(churn_demo.manifest)
    assert manifest.wallet_address == demo_wallet()
    assert manifest.license == "CC0-1.0"


def test_demo_data_passes_every_pipeline_check_and_is_rewarded(
    settings: Settings, db: Database, churn_demo: DemoData
) -> None:
    store = LocalObjectStore(settings.objects_dir)
    add_benchmark(db, store, churn_demo.benchmark)
    job_id, version = contribute(
        db, store, churn_demo.contribution, with_manifest=churn_demo.manifest
    )
    run_pipeline(Services(settings, db=db, store=store), version)
    row = job(db, job_id)
    assert row.status == REWARDED, row.reason
    assert row.quality is not None and row.quality["checks"]["passed"] is True
    assert row.quality["pii"]["found"] is False
    assert row.improvement_pct is not None and row.improvement_pct > 10
    assert row.tokens is not None and row.tokens > 0


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")
def test_the_loan_demo_improves_the_owners_trained_model_by_a_few_percent(
    settings: Settings, db: Database
) -> None:
    """The second demo model: the owner's folder, whose train.py runs in the sandbox, and a
    benchmark file with the owner's base training data (split `train`), so the demo
    contribution improves an already-trained model by a few percent."""
    folder = demo_model(DEMO_LOAN_FOLDER)
    definition = folder.definition
    store = LocalObjectStore(settings.objects_dir)
    with db.session() as session:
        model_id = register_model_folder(session, store, folder, ModelOwner(user_id="admin")).id
    data = make_demo_data(
        DemoModel(definition.name, definition.task_type, definition.target_column,
                  definition.data_spec)
    )  # fmt: skip
    splits = pd.Series([row["split"] for row in data.benchmark]).value_counts().to_dict()
    assert splits == {"test": 1500, "train": 500}
    assert data.columns[-1] == "split"
    add_benchmark(db, store, data.benchmark, model_id=model_id, target_column="defaulted")
    job_id, version = contribute(
        db, store, data.contribution, model_id=model_id, with_manifest=data.manifest
    )
    run_pipeline(Services(settings, db=db, store=store), version, model_id=model_id)
    row = job(db, job_id)
    assert row.status == REWARDED, row.reason
    assert row.improvement_pct is not None and 2 < row.improvement_pct < 8
    assert row.quality is not None
    valuation = row.quality["valuation"]
    assert valuation["base_rows"] == 500 and valuation["interval"]["low"] > 0
    assert valuation["score_without"] > 0.8  # the owner's model, already trained


FLAT_SPEC: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["size", "rooms", "district", "garden", "price"],
    "properties": {
        "size": {"type": "number", "minimum": 20, "maximum": 300},
        "rooms": {"type": "integer", "minimum": 1, "maximum": 8},
        "district": {"type": "string", "enum": ["north", "south", "east", "west"]},
        "garden": {"type": "boolean"},
        "code": {"type": "string", "minLength": 3, "maxLength": 5},
        "email": {"type": "string", "format": "email"},
        "price": {"type": "number", "minimum": 0, "maximum": 2000000},
    },
}


def test_any_flat_regression_spec_gets_rows_that_lower_the_error() -> None:
    model = DemoModel("houses", "regression", "price", FLAT_SPEC)
    data = make_demo_data(model, benchmark_rows=300, contribution_rows=300)
    validator = RowValidator(FLAT_SPEC)
    assert validator.errors_for(data.benchmark + data.contribution) == []
    # The optional e-mail column cannot be generated without PII-like values: left out.
    assert data.columns == ["size", "rooms", "district", "garden", "code", "price"]
    result = evaluate_contribution(
        None,
        pd.DataFrame(data.contribution),
        pd.DataFrame(data.benchmark),
        task_type="regression",
        estimator="linear_regression",
        target_column="price",
        metric_name="rmse",
        metric_direction="lower_is_better",
    )
    assert result.improvement_pct > 30


def test_any_flat_classification_spec_gets_learnable_labels() -> None:
    spec = {**FLAT_SPEC, "properties": {**FLAT_SPEC["properties"]}}
    spec["properties"]["price"] = {"type": "string", "enum": ["cheap", "fair", "dear"]}
    model = DemoModel("price-band", "classification", "price", spec)
    data = make_demo_data(model, benchmark_rows=600, contribution_rows=600)
    labels = {row["price"] for row in data.contribution}
    assert labels == {"cheap", "fair", "dear"}
    result = evaluate_contribution(
        None,
        pd.DataFrame(data.contribution),
        pd.DataFrame(data.benchmark),
        task_type="classification",
        estimator="logistic_regression",
        target_column="price",
        metric_name="accuracy",
        metric_direction="higher_is_better",
    )
    assert result.improvement_pct > 50


def test_a_required_property_no_generator_can_fill_is_named() -> None:
    spec = {**FLAT_SPEC, "required": [*FLAT_SPEC["required"], "email"]}
    with pytest.raises(InvalidInput, match="cannot generate values for 'email'"):
        make_demo_data(DemoModel("m", "regression", "price", spec))


# --- the command -----------------------------------------------------------------------------


@pytest.mark.slow
def test_demo_data_command_writes_files_the_other_commands_accept(
    run: Callable[..., tuple[int, str, str]],
    tmp_path: Path,
    platform_key: Callable[..., str],
    churn_demo: DemoData,
) -> None:
    folder = tmp_path / "demo"
    status, out, err = run("demo-data", str(folder))
    assert status == 0, err
    assert out.splitlines() == [
        "model 1 (customer-churn), target column churned:",
        f"wrote {folder / 'benchmark.csv'} (2000 rows)",
        f"wrote {folder / 'contribution.csv'} (1000 rows)",
        f"wrote {folder / 'manifest.json'} (wallet {demo_wallet()})",
        f"wrote {folder / 'wallet.key'} (the demo wallet's key, public: a local chain's only)",
    ]
    # The key of the manifest's wallet, so the demo's reward can be claimed (`marketplace claim`).
    key = (folder / "wallet.key").read_text().strip()
    assert Account.from_key(key).address == demo_wallet()
    assert "marketplace upload 1" in err

    spec = demo_definition().data_spec
    # The CSV reads back as exactly the generated rows (types from the data-spec).
    assert read_rows(folder / "contribution.csv", spec).rows == churn_demo.contribution
    assert load_manifest(folder / "manifest.json") == churn_demo.manifest
    assert json.loads((folder / "manifest.json").read_text()) == churn_demo.manifest

    status, out, err = run("validate", "1", str(folder / "contribution.csv"))
    assert status == 0, out + err
    assert "quality: passed" in out

    # Upload without --target-column: the CLI sends the model's own target column.
    key = platform_key("admin", scopes=["benchmarks:write"])
    status, out, err = run("upload", "1", str(folder / "benchmark.csv"), "--api-key", key)
    assert status == 0, err
    assert "target column churned, metric accuracy (higher_is_better)" in err
    assert json.loads(out)["filename"] == "benchmark.csv"

    status, _, err = run("demo-data", str(tmp_path / "x"), "--model", "9")
    assert status == 1 and "no model 9 on the server (models: 1 (customer-churn))" in err


def test_upload_fields_default_to_the_model() -> None:
    classifier = {"id": 1, "task_type": "classification", "target_column": "churned"}
    regressor = {"id": 2, "task_type": "regression", "target_column": "price"}
    assert model_upload_fields({}, classifier) == {
        "target_column": "churned",
        "metric_name": "accuracy",
        "metric_direction": "higher_is_better",
    }
    assert model_upload_fields({"eval_split": "holdout"}, regressor) == {
        "eval_split": "holdout",
        "target_column": "price",
        "metric_name": "rmse",
        "metric_direction": "lower_is_better",
    }
    # What the user gives wins; a given metric brings its own direction.
    assert model_upload_fields({"target_column": "y", "metric_name": "r2"}, regressor) == {
        "target_column": "y",
        "metric_name": "r2",
        "metric_direction": "higher_is_better",
    }
    # Unknown model: sent as given, the server answers.
    assert model_upload_fields({"metric_name": "f1"}, None) == {
        "metric_name": "f1",
        "metric_direction": "higher_is_better",
    }
