"""Rewards, metric history and contributor manifests over HTTP; the manifest on a contribution."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import DatasetVersion, Evaluation, RewardEntry
from pipeline.demo.churn_data import churn_rows
from pipeline.rewards.formula import to_checksum_address
from pipeline.rewards.manifests import MANIFEST_MAX_BYTES
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore, dataset_key
from tests.support.pipeline import (
    WALLET_A,
    WALLET_B,
    add_benchmark,
    contribute,
    manifest,
    run_pipeline,
)

Headers = Callable[..., dict[str, str]]


def contribution_body(rows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"modelId": 1, "benchmarkSpecId": None, "rows": rows, **extra}


# --- GET /api/rewards ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wallet",
    [
        "0x123",
        "52908400098527886E0F7030069857D2E4169EE7",
        "0x52908400098527886E0F7030069857D2E4169EE8z",
        "0x52908400098527886e0F7030069857D2E4169EE7",  # mixed case, bad EIP-55 checksum
    ],
)
def test_rewards_for_an_invalid_wallet_is_400(client: Any, wallet: str) -> None:
    response = client.get("/api/rewards", params={"wallet": wallet})
    assert response.status_code == 400
    assert "wallet address" in response.json()["detail"]


def test_rewards_needs_the_wallet_parameter(client: Any) -> None:
    assert client.get("/api/rewards").status_code == 400


def test_rewards_of_a_wallet_without_entries_is_empty(client: Any) -> None:
    response = client.get("/api/rewards", params={"wallet": WALLET_B})
    assert response.status_code == 200
    assert response.json() == {
        "wallet": to_checksum_address(WALLET_B),
        "totalTokens": 0.0,
        "totalAmount": "0",
        "settledAmount": "0",
        "claimedAmount": "0",
        "claimableAmount": "0",
        "count": 0,
        "entries": [],
    }


def test_rewards_lists_the_ledger_newest_first_in_any_spelling(
    client: Any, settings: Settings, db: Database, store: LocalObjectStore
) -> None:
    svc = Services(settings, db=db, store=store)
    add_benchmark(db, store)
    first_id, first = contribute(db, store, churn_rows(200, seed=2), with_manifest=manifest())
    run_pipeline(svc, first)
    second_id, second = contribute(db, store, churn_rows(400, seed=3), with_manifest=manifest())
    run_pipeline(svc, second)
    with db.session() as session:
        tokens = {e.contribution_id: e.tokens for e in session.scalars(select(RewardEntry))}
    assert first_id in tokens

    response = client.get("/api/rewards", params={"wallet": WALLET_A.lower()})

    assert response.status_code == 200
    body = response.json()
    assert body["wallet"] == WALLET_A
    assert body["count"] == len(tokens)
    assert body["totalTokens"] == pytest.approx(sum(tokens.values()))
    entries = body["entries"]
    assert [e["jobId"] for e in entries] == [j for j in (second_id, first_id) if j in tokens]
    latest = entries[-1]
    assert latest["modelId"] == 1 and latest["datasetVersion"] == first
    assert latest["metricName"] == "accuracy" and latest["improvementPct"] > 0
    assert latest["tokens"] == pytest.approx(tokens[first_id])
    limited = client.get("/api/rewards", params={"wallet": WALLET_A, "limit": 1}).json()
    assert len(limited["entries"]) == 1 and limited["count"] == len(tokens)
    assert client.get("/api/rewards", params={"wallet": WALLET_A, "limit": 0}).status_code == 400


# --- GET /api/models/{id}/evaluations -------------------------------------------------------------


def test_evaluations_are_the_metric_history_newest_first(
    client: Any, settings: Settings, db: Database, store: LocalObjectStore
) -> None:
    svc = Services(settings, db=db, store=store)
    spec_id, bench = add_benchmark(db, store)
    _, version = contribute(db, store, with_manifest=manifest())
    run_pipeline(svc, version)  # the benchmark's re-score, then the contribution
    run_pipeline(svc, version, trigger="schedule")

    response = client.get("/api/models/1/evaluations")

    assert response.status_code == 200
    history = response.json()["evaluations"]
    assert [(e["kind"], e["trigger"], e["datasetVersion"]) for e in history] == [
        ("rescore", "schedule", None),
        ("contribution", "arrival", version),
        ("rescore", "arrival", bench),
    ]
    schedule, contribution, _ = history
    assert contribution["benchmarkSpecId"] == spec_id and contribution["evalSplit"] == "test"
    assert contribution["metricName"] == "accuracy"
    assert contribution["metricDirection"] == "higher_is_better"
    assert contribution["score"] > contribution["baselineScore"]
    assert contribution["improvementPct"] > 0
    assert schedule["score"] == pytest.approx(contribution["score"])
    assert client.get("/api/models/1/evaluations", params={"limit": 1}).json()["evaluations"] == [
        schedule
    ]


def test_evaluations_of_an_unknown_model_is_404(client: Any) -> None:
    assert client.get("/api/models/999/evaluations").status_code == 404
    # Beyond the 32-bit ids the document states: a bad request, like every model-id route.
    assert client.get("/api/models/99999999999999/evaluations").status_code == 400


def test_evaluations_of_a_model_without_any_is_empty(client: Any, db: Database) -> None:
    with db.session() as session:
        assert session.scalar(select(Evaluation.id)) is None
    assert client.get("/api/models/1/evaluations").json() == {"modelId": 1, "evaluations": []}


# --- /api/contributors/me -------------------------------------------------------------------------


def test_contributor_manifest_needs_a_session(client: Any) -> None:
    assert client.get("/api/contributors/me").status_code == 401
    assert client.put("/api/contributors/me", json=manifest()).status_code == 401


def test_contributor_manifest_is_stored_and_replaced(client: Any, auth_headers: Headers) -> None:
    headers = auth_headers("dora")
    assert client.get("/api/contributors/me", headers=headers).status_code == 404

    created = client.put(
        "/api/contributors/me", headers=headers, json=manifest(WALLET_A, tool="cli 1.2")
    )
    assert created.status_code == 201
    assert created.json()["userId"] == "dora"
    assert created.json()["manifest"]["tool"] == "cli 1.2"  # client fields are kept

    replaced = client.put("/api/contributors/me", headers=headers, json=manifest(WALLET_B))
    assert replaced.status_code == 200
    got = client.get("/api/contributors/me", headers=headers)
    assert got.status_code == 200 and got.json()["manifest"]["wallet_address"] == WALLET_B
    # Another user's manifest is their own.
    assert client.get("/api/contributors/me", headers=auth_headers("erin")).status_code == 404


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (manifest("0x1234"), "manifest: wallet_address: "),
        (manifest(license="WTFPL-9"), "manifest: license: unknown license identifier"),
        (
            manifest(contributors=[{"id": "a", "wallet_address": WALLET_B, "weight": 0.5}]),
            "manifest: contributors: contributor weights must sum to 1 (they sum to 0.5)",
        ),
        ({"wallet_address": WALLET_A}, "manifest: contributor_id: "),
        ([manifest()], None),
    ],
)
def test_invalid_contributor_manifest_is_400_naming_the_field(
    client: Any, auth_headers: Headers, body: Any, detail: str | None
) -> None:
    response = client.put("/api/contributors/me", headers=auth_headers(), json=body)
    assert response.status_code == 400
    if detail is not None:
        assert response.json()["detail"].startswith(detail), response.json()


def test_incomplete_contributor_manifest_is_refused_naming_every_problem_at_once(
    client: Any, auth_headers: Headers
) -> None:
    body = {"wallet_address": "0x1234", "license": "WTFPL-9"}
    response = client.put("/api/contributors/me", headers=auth_headers(), json=body)
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail.startswith("manifest: contributor_id: Field required; wallet_address: ")
    for named in ("data_description: Field required", "data_source: Field required", "license: "):
        assert named in detail


# --- the manifest on a contribution ---------------------------------------------------------------


def test_contribution_with_a_manifest_stores_it_beside_the_data(
    client: Any, auth_headers: Headers, db: Database, store: LocalObjectStore
) -> None:
    body = contribution_body(churn_rows(120, seed=1), manifest=manifest(WALLET_B))
    response = client.post("/api/models/1/contributions", headers=auth_headers(), json=body)
    assert response.status_code == 202, response.json()
    with db.session() as session:
        dv = session.scalars(select(DatasetVersion)).one()
    assert dv.manifest == manifest(WALLET_B)
    with store.open(dataset_key(1, dv.version, "manifest.json")) as fh:
        assert json.load(fh) == manifest(WALLET_B)


def test_contribution_with_an_invalid_manifest_is_400_with_the_row_error_body(
    client: Any, auth_headers: Headers, db: Database
) -> None:
    rows = churn_rows(3, seed=1)
    rows[1]["contract"] = "weekly"
    body = contribution_body(rows, manifest=manifest("0xnot-a-wallet"))
    response = client.post("/api/models/1/contributions", headers=auth_headers(), json=body)

    assert response.status_code == 400
    payload = response.json()
    assert payload["ok"] is False and payload["status"] == 400
    paths = [(e["path"], e["rowIndex"]) for e in payload["errors"]]
    assert paths == [("rows[1].contract", 1), ("manifest.wallet_address", -1)]
    assert "wallet" in payload["errors"][-1]["message"]

    alone = client.post(
        "/api/models/1/contributions",
        headers=auth_headers(),
        json=contribution_body(churn_rows(3, seed=1), manifest={"contributor_id": "x"}),
    )
    assert alone.status_code == 400
    assert alone.json()["message"] == "the contributor manifest is invalid"
    # Every problem of the manifest at once, one error each.
    assert [(e["path"], e["message"]) for e in alone.json()["errors"]] == [
        ("manifest.wallet_address", "Field required"),
        ("manifest.data_description", "Field required"),
        ("manifest.data_source", "Field required"),
        ("manifest.license", "Field required"),
    ]
    with db.session() as session:
        assert session.scalar(select(DatasetVersion.id)) is None  # nothing stored


def test_contribution_with_a_manifest_too_large_for_its_file_is_400(
    client: Any, auth_headers: Headers, db: Database
) -> None:
    big = {**manifest(WALLET_B), "notes": "x" * MANIFEST_MAX_BYTES}
    body = contribution_body(churn_rows(3, seed=1), manifest=big)
    response = client.post("/api/models/1/contributions", headers=auth_headers(), json=body)
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "path": "manifest",
            "message": f"the manifest is larger than {MANIFEST_MAX_BYTES} bytes",
            "rowIndex": -1,
        }
    ]
    with db.session() as session:
        assert session.scalar(select(DatasetVersion.id)) is None  # nothing stored


def test_contribution_job_shows_the_pipeline_outcome(
    client: Any,
    auth_headers: Headers,
    settings: Settings,
    db: Database,
    store: LocalObjectStore,
) -> None:
    add_benchmark(db, store)
    body = contribution_body(churn_rows(200, seed=2), manifest=manifest())
    job_id = client.post("/api/models/1/contributions", headers=auth_headers(), json=body).json()[
        "jobId"
    ]
    url = f"/api/models/1/contributions/{job_id}"
    assert client.get(url, headers=auth_headers()).json()["status"] == "queued"

    with db.session() as session:
        version = session.scalars(
            select(DatasetVersion.version).where(DatasetVersion.kind == "contribution")
        ).one()
    run_pipeline(Services(settings, db=db, store=store), version)

    view = client.get(url, headers=auth_headers()).json()
    assert view["status"] == "rewarded"
    assert view["tokens"] > 0 and view["improvementPct"] > 0
    assert view["reason"].startswith("rewarded ")
    assert view["quality"]["checks"]["passed"] is True
    assert view["quality"]["reward"]["recipients"][0]["wallet"] == WALLET_A
