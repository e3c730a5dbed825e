"""Who may change a model's ground truth (issue 9 §1): owners, benchmarks, schedules.

A model belongs to one user or one organization. Only keys acting for the owner may upload a
benchmark or create, change or delete the evaluation schedule; everyone else gets 403 {detail}
and nothing is stored. Benchmarks are never served back, and every evaluation names the
benchmark spec and version it was measured on. The attack of the issue is replayed on
scikit-learn's breast-cancer data: an organization Developer uploads a label-flipped benchmark.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer
from sqlalchemy import func, select

from pipeline.auth.keys import KeyCreate, create_key
from pipeline.auth.orgs import Role, create_org, set_member
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import (
    BenchmarkSpec,
    DatasetVersion,
    EvaluationSchedule,
    Model,
)
from pipeline.intake.receiving import upload_tmp_root
from pipeline.models.definitions import ModelDefinition, demo_definition
from pipeline.models.registry import ModelOwner, register_model, seed_demo_model

UPLOAD = "/api/v1/benchmarks/upload/{}"
SCHEDULE = "/api/v1/models/{}/evaluation-schedule"
ADMIN = "admin"  # Settings.admin_user_id's default: the demo model's owner


# --- a real model: scikit-learn's breast-cancer data ------------------------------------------


def cancer_frame() -> pd.DataFrame:
    frame: pd.DataFrame = load_breast_cancer(as_frame=True).frame
    return frame


def cancer_definition(name: str = "breast-cancer") -> ModelDefinition:
    frame = cancer_frame()
    features = [c for c in frame.columns if c != "target"]
    properties: dict[str, Any] = {name: {"type": "number"} for name in features}
    properties["target"] = {"type": "integer", "enum": [0, 1]}
    return ModelDefinition(
        name=name,
        description="Malignant (0) or benign (1) from digitized cell-nucleus measurements.",
        task_type="classification",
        target_column="target",
        estimator="logistic_regression",
        data_spec={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": False,
            "required": list(properties),
            "properties": properties,
        },
        example_row={k: (int(v) if k == "target" else float(v)) for k, v in frame.iloc[0].items()},
    )


def benchmark_csv(*, flip_labels: bool = False) -> bytes:
    frame = cancer_frame().iloc[:200].copy()
    if flip_labels:
        frame["target"] = 1 - frame["target"]
    return frame.to_csv(index=False).encode()


# --- fixtures: one organization owns a model, the admin user owns the demo -------------------


@pytest.fixture
def acme(db: Database) -> dict[str, Any]:
    """Org acme (olivia Owner, adam Admin, dora Developer, vera Viewer) owning the cancer model;
    org globex, where adam is Owner too."""
    with db.session() as session:
        org = create_org(session, "acme", "olivia")
        set_member(session, org, "adam", Role.ADMIN)
        set_member(session, org, "dora", Role.DEVELOPER)
        set_member(session, org, "vera", Role.VIEWER)
        globex = create_org(session, "globex", "adam")
        model = register_model(session, cancer_definition(), ModelOwner(org_id=org.id))
        return {"org": org.id, "globex": globex.id, "model": model.id}


@pytest.fixture
def key_for(db: Database) -> Callable[..., dict[str, str]]:
    """Authorization headers with a new platform key of `user` (issued for `org` if given)."""

    def make(user: str, org: str | None = None, **fields: Any) -> dict[str, str]:
        body = KeyCreate(name="k", service_id="platform", **fields)
        with db.session() as session:
            value = create_key(session, body, user_id=user, org_id=org).api_key
        return {"Authorization": f"Bearer {value}"}

    return make


def upload(client: Any, headers: dict[str, str], model_id: int, data: bytes) -> Any:
    return client.post(
        UPLOAD.format(model_id),
        headers=headers,
        files={"file": ("bench.csv", data)},
        data={"target_column": "target", "metric_name": "accuracy"},
    )


def stored(db: Database, settings: Settings, model_id: int) -> dict[str, Any]:
    """Everything an upload could leave behind for a model."""
    with db.session() as session:
        specs = session.scalar(
            select(func.count())
            .select_from(BenchmarkSpec)
            .where(BenchmarkSpec.model_id == model_id)
        )
        versions = session.scalar(
            select(func.count())
            .select_from(DatasetVersion)
            .where(DatasetVersion.model_id == model_id)
        )
        last_version = session.scalar(select(Model.last_version).where(Model.id == model_id))
    folder = settings.objects_dir / "datasets" / str(model_id)
    tmp = upload_tmp_root(settings)
    return {
        "specs": specs,
        "versions": versions,
        "last_version": last_version,
        "objects": sorted(p.name for p in folder.rglob("*") if p.is_file())
        if folder.exists()
        else [],
        "temp": list(tmp.iterdir()) if tmp.exists() else [],
    }


NOTHING = {"specs": 0, "versions": 0, "last_version": 0, "objects": [], "temp": []}


# --- benchmark uploads ----------------------------------------------------------------------


def test_an_org_developer_cannot_upload_a_label_flipped_benchmark(
    client: Any, db: Database, settings: Settings, acme: dict[str, Any], key_for: Callable
) -> None:
    model = acme["model"]
    flipped = benchmark_csv(flip_labels=True)
    for headers, why in (
        (key_for("dora", acme["org"]), "owner"),  # the attack: a Developer's org key
        (key_for("dora"), "owner"),  # the same Developer's personal key
        # A Viewer's org key is refused before ownership is even asked (live membership).
        (key_for("vera", acme["org"]), "Viewer"),
        (key_for("mallory"), "owner"),  # a stranger
        (key_for(ADMIN), "owner"),  # the operator's user owns the demo model, not this one
    ):
        response = upload(client, headers, model, flipped)
        assert response.status_code == 403, response.text
        assert set(response.json()) == {"detail"}
        assert why in response.json()["detail"]
    assert stored(db, settings, model) == NOTHING

    # The organization's Owners and Admins may: an Admin's org key, the Owner's own key.
    assert upload(client, key_for("adam", acme["org"]), model, benchmark_csv()).status_code == 201
    assert upload(client, key_for("olivia"), model, benchmark_csv()).status_code == 201
    after = stored(db, settings, model)
    assert (after["specs"], after["versions"], after["last_version"]) == (2, 2, 2)


def test_org_rights_follow_the_members_current_role_and_the_keys_org(
    client: Any, db: Database, settings: Settings, acme: dict[str, Any], key_for: Callable
) -> None:
    model = acme["model"]
    adam = key_for("adam", acme["org"])
    assert upload(client, adam, model, benchmark_csv()).status_code == 201

    # A key issued for another organization never acts for acme, though adam owns globex.
    assert (
        upload(client, key_for("adam", acme["globex"]), model, benchmark_csv()).status_code == 403
    )

    # Demoted: the same key is refused on its next request.
    with db.session() as session:
        from pipeline.auth.orgs import find_org

        set_member(session, find_org(session, "acme"), "adam", Role.DEVELOPER)
    assert upload(client, adam, model, benchmark_csv()).status_code == 403
    assert stored(db, settings, model)["specs"] == 1


def test_a_user_owned_model_takes_only_the_users_personal_keys(
    client: Any, db: Database, settings: Settings, acme: dict[str, Any], key_for: Callable
) -> None:
    with db.session() as session:
        model = register_model(
            session, cancer_definition("cancer-bob"), ModelOwner(user_id="bob")
        ).id
    # bob's key issued for an organization acts for that organization, not for bob.
    with db.session() as session:
        from pipeline.auth.orgs import find_org

        set_member(session, find_org(session, "acme"), "bob", Role.OWNER)
    assert upload(client, key_for("bob", acme["org"]), model, benchmark_csv()).status_code == 403
    assert upload(client, key_for("alice"), model, benchmark_csv()).status_code == 403
    assert stored(db, settings, model) == NOTHING
    assert upload(client, key_for("bob"), model, benchmark_csv()).status_code == 201


def test_a_model_without_owner_takes_no_key(
    client: Any, db: Database, settings: Settings, key_for: Callable
) -> None:
    with db.session() as session:
        model = register_model(session, cancer_definition("orphan")).id
    for user in (ADMIN, "alice"):
        assert upload(client, key_for(user), model, benchmark_csv()).status_code == 403
    assert stored(db, settings, model) == NOTHING


def test_a_refused_upload_is_answered_before_the_body_is_read(
    settings: Settings, db: Database, key_for: Callable
) -> None:
    """Real server, raw socket: headers announce 50 MB, only the first bytes are sent."""
    from tests.support.live_server import serve

    headers = key_for("mallory")
    with serve(settings) as (url, _app):
        parts = urlsplit(url)
        boundary = "ownercheck"
        preamble = (
            f"--{boundary}\r\n"
            'Content-Disposition: form-data; name="file"; filename="bench.csv"\r\n'
            "Content-Type: text/csv\r\n\r\n"
        ).encode() + benchmark_csv()[:1000]
        head = (
            f"POST {UPLOAD.format(1)} HTTP/1.1\r\n"
            f"Host: {parts.hostname}\r\n"
            f"Authorization: {headers['Authorization']}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {50 * 1024 * 1024}\r\n\r\n"
        ).encode()
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
            sock.sendall(head + preamble)
            answer = sock.recv(65536)
    status_line = answer.split(b"\r\n", 1)[0]
    assert b" 403 " in status_line, answer[:300]
    assert b"owner" in answer
    assert stored(db, settings, 1) == NOTHING


# --- evaluation schedules -------------------------------------------------------------------


def test_only_the_owner_creates_changes_or_deletes_the_schedule(
    client: Any, db: Database, key_for: Callable
) -> None:
    from tests.support.scheduling import add_benchmark

    add_benchmark(db, 1)
    url = SCHEDULE.format(1)
    stranger = key_for("alice")
    owner = key_for(ADMIN)

    refused = client.post(url, json={"cron_expression": "@hourly"}, headers=stranger)
    assert refused.status_code == 403 and set(refused.json()) == {"detail"}
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(EvaluationSchedule)) == 0

    created = client.post(url, json={"cron_expression": "0 3 * * *"}, headers=owner)
    assert created.status_code == 201, created.text
    assert client.put(url, json={"enabled": False}, headers=stranger).status_code == 403
    assert client.delete(url, headers=stranger).status_code == 403
    # Reading stays open to any key with schedules:read; nothing changed.
    reader = key_for("alice", scopes=["schedules:read"])
    seen = client.get(url, headers=reader)
    assert seen.status_code == 200
    assert (seen.json()["cron_expression"], seen.json()["enabled"]) == ("0 3 * * *", True)

    assert client.put(url, json={"enabled": False}, headers=owner).status_code == 200
    assert client.delete(url, headers=owner).status_code == 204


def test_org_admins_manage_the_schedule_of_an_org_model(
    client: Any, db: Database, acme: dict[str, Any], key_for: Callable
) -> None:
    from tests.support.scheduling import add_benchmark

    add_benchmark(db, acme["model"])
    url = SCHEDULE.format(acme["model"])
    body = {"cron_expression": "@daily"}
    assert client.post(url, json=body, headers=key_for("dora", acme["org"])).status_code == 403
    assert client.post(url, json=body, headers=key_for("adam", acme["org"])).status_code == 201


# --- the demo model and the operator commands ------------------------------------------------


def test_the_demo_model_belongs_to_the_admin_user(db: Database, tmp_path: Path) -> None:
    from pipeline.bootstrap import prepare_store

    with db.session() as session:
        demo = session.get(Model, 1)
        assert demo is not None and (demo.owner_user_id, demo.owner_org_id) == (ADMIN, None)

    # ADMIN_USER_ID decides who that is on a fresh store.
    fresh = Settings(marketplace_data_dir=tmp_path / "fresh", admin_user_id="root")
    prepare_store(fresh)
    other = Database.from_settings(fresh)
    try:
        with other.session() as session:
            assert session.scalar(select(Model.owner_user_id).where(Model.id == 1)) == "root"
    finally:
        other.dispose()


def test_a_demo_model_from_before_owners_is_given_to_the_admin(db: Database) -> None:
    with db.session() as session:
        demo = session.get(Model, 1)
        assert demo is not None
        demo.owner_user_id = None
        other = register_model(session, cancer_definition("ownerless"))
        other_id = other.id
    assert seed_demo_model(db, owner_user_id="root") is None
    with db.session() as session:
        assert session.scalar(select(Model.owner_user_id).where(Model.id == 1)) == "root"
        # Only the demo: another model without an owner stays without one.
        assert session.scalar(select(Model.owner_user_id).where(Model.id == other_id)) is None


def owner_of(db: Database, model_id: int) -> tuple[str | None, str | None]:
    with db.session() as session:
        model = session.get(Model, model_id)
        assert model is not None
        return model.owner_user_id, model.owner_org_id


def test_cli_models_add_and_set_owner(
    cli: Any, db: Database, tmp_path: Path, acme: dict[str, Any]
) -> None:
    import yaml

    path = tmp_path / "cancer.yaml"
    path.write_text(yaml.safe_dump(cancer_definition("cancer-cli").model_dump()))

    status, out, _ = cli("models", "add", str(path))
    assert status == 0
    model_id = int(out.strip().splitlines()[-1])
    assert owner_of(db, model_id) == (ADMIN, None)  # no owner given: the admin user
    assert "owned by user admin" in out

    status, out, _ = cli("models", "add", str(path), "--owner-org", "acme")
    assert status == 0 and owner_of(db, model_id) == (None, acme["org"])
    status, _, _ = cli("models", "add", str(path))  # re-registering keeps the owner
    assert status == 0 and owner_of(db, model_id) == (None, acme["org"])

    status, out, _ = cli("models", "set-owner", "cancer-cli", "--user", "bob")
    assert status == 0 and owner_of(db, model_id) == ("bob", None)
    assert "owned by user bob" in out
    status, _, _ = cli("models", "set-owner", str(model_id), "--org", acme["org"])
    assert status == 0 and owner_of(db, model_id) == (None, acme["org"])

    status, out, _ = cli("models", "list")
    assert status == 0
    line = next(row for row in out.splitlines() if "cancer-cli" in row)
    assert f"owner=organization {acme['org']}" in line

    status, _, err = cli("models", "set-owner", "cancer-cli", "--org", "no-such-org")
    assert status == 1 and "no-such-org" in err
    assert owner_of(db, model_id) == (None, acme["org"])
    status, _, err = cli("models", "set-owner", "no-such-model", "--user", "bob")
    assert status == 1 and "no-such-model" in err
    with pytest.raises(SystemExit):  # one of --user and --org is required
        cli("models", "set-owner", "cancer-cli")


def test_an_owner_is_one_user_or_one_organization() -> None:
    from pipeline.core.errors import InvalidInput

    for bad in ({}, {"user_id": "a", "org_id": "b"}, {"user_id": "  "}):
        with pytest.raises(InvalidInput):
            ModelOwner(**bad)
    assert demo_definition().name == "customer-churn"  # the model the admin owns


# --- the benchmark is a yardstick nobody reads back -----------------------------------------


def test_evaluations_name_the_benchmark_spec_and_version_they_used(
    client: Any, db: Database, settings: Settings, key_for: Callable
) -> None:
    from pipeline.demo.churn_data import churn_benchmark_rows
    from pipeline.store.objectstore import object_store_from_settings
    from tests.support.pipeline import contribute, run_pipeline, services

    store = object_store_from_settings(settings)
    svc = services(settings, db, store)
    owner = key_for(ADMIN)

    def upload_churn(seed: int) -> dict[str, Any]:
        data = pd.DataFrame(churn_benchmark_rows(300, seed=seed)).to_csv(index=False).encode()
        response = client.post(
            UPLOAD.format(1),
            headers=owner,
            files={"file": ("churn.csv", data)},
            data={"target_column": "churned"},
        )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    first = upload_churn(11)
    _, version = contribute(db, store)
    run_pipeline(svc, version)
    second = upload_churn(12)
    with db.session() as session:
        second_version = session.scalar(
            select(DatasetVersion.version)
            .join(BenchmarkSpec, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(BenchmarkSpec.id == second["spec_id"])
        )
    run_pipeline(svc, second_version or "", trigger="arrival")

    history = client.get("/api/models/1/evaluations").json()["evaluations"]
    used = {(e["datasetVersion"], e["benchmarkSpecId"], e["benchmarkVersion"]) for e in history}
    assert ("v1", first["spec_id"], "v1") in used  # the first benchmark's own re-score
    assert (version, first["spec_id"], "v1") in used  # the contribution, on the first
    assert (second_version, second["spec_id"], second_version) in used  # the new yardstick


SECRET_NOTE = "bench-only-note-{}"
BASE_NOTE = "base-only-note-{}"


def test_no_endpoint_serves_a_benchmarks_rows(
    client: Any,
    db: Database,
    settings: Settings,
    key_for: Callable,
    auth_headers: Callable[..., dict[str, str]],
) -> None:
    """Crawl every GET route with a contributor's credentials after a full pipeline run: neither
    the benchmark's rows nor the owner's base training data (its `train` split) come back."""
    from pipeline.core.tables import utcnow
    from pipeline.demo.churn_data import churn_benchmark_rows
    from pipeline.store.objectstore import object_store_from_settings
    from pipeline.store.queue import arrival_queue_from_settings
    from pipeline.triggers.drain import drain_queue
    from tests.support.pipeline import WALLET_A, contribute, manifest, run_pipeline, services

    # 300 benchmark rows and, in the same file, 150 rows of the owner's base training data.
    rows = churn_benchmark_rows(300, seed=21) + [
        {**row, "split": "train"} for row in churn_benchmark_rows(150, seed=22)
    ]
    for i, row in enumerate(rows):
        row["monthly_charges"] = round(40 + i * 0.0173 + 0.000091, 6)  # values found nowhere else
        row["note"] = (SECRET_NOTE if row["split"] == "test" else BASE_NOTE).format(i)
    data = pd.DataFrame(rows).to_csv(index=False).encode()
    uploaded = client.post(
        UPLOAD.format(1),
        headers=key_for(ADMIN),
        files={"file": ("churn.csv", data)},
        data={"target_column": "churned"},
    )
    assert uploaded.status_code == 201, uploaded.text
    store = object_store_from_settings(settings)
    job_id, version = contribute(db, store, user="alice", with_manifest=manifest())
    run_pipeline(services(settings, db, store), version)
    drain_queue(
        arrival_queue_from_settings(settings, db),
        db,
        store,
        now=utcnow(),
        max_messages=10,
        time_budget_seconds=10,
    )
    secrets = [SECRET_NOTE.format(i) for i in range(0, 300, 7)]
    secrets += [BASE_NOTE.format(i) for i in range(300, 450, 7)]
    secrets += [str(row["monthly_charges"]) for row in rows[::7]]

    contributor_key = key_for("alice")
    key_id = client.get("/api/v1/whoami", headers=contributor_key).json()["key_id"]
    fill = {
        "modelId": "1",
        "model_id": "1",
        "jobId": job_id,
        "key_id": key_id,
        "org_id": "x",
        "epoch": "2026-12-07",
        "wallet": WALLET_A,
    }
    queries = {"wallet": WALLET_A}
    contributor = {**auth_headers("alice"), **contributor_key}
    paths = []
    for path, operations in client.get("/openapi.json").json()["paths"].items():
        if "get" not in operations:
            continue
        params = operations["get"].get("parameters", [])
        query = {
            p["name"]: queries[p["name"]]
            for p in params
            if p["in"] == "query" and p.get("required")
        }
        paths.append((path.format(**fill), query))
    # The web pages are left out of the schema; crawl them too.
    paths += [("/models", {}), ("/models/1/contribute", {}), ("/static/contribute.js", {})]
    assert len(paths) >= 12
    answered = 0
    for path, query in paths:
        for headers in (contributor, auth_headers("alice")):
            response = client.get(path, params=query, headers=headers)
            text = response.text
            leaked = [s for s in secrets if s in text]
            assert not leaked, f"GET {path} returned benchmark values {leaked[:3]}"
            answered += response.status_code == 200
    assert answered >= 12

    # The job view names its evaluation figures, never benchmark rows; the arrival list shows a
    # contributor nothing of a model it does not own, and shows the owner the benchmark's object,
    # whose URI points into the private store (no route serves it).
    job = client.get(f"/api/models/1/contributions/{job_id}", headers=auth_headers("alice"))
    assert job.status_code == 200 and job.json()["status"] in {"rewarded", "rejected"}
    arrivals = client.get("/api/v1/dataset-arrivals", headers=contributor_key).json()["arrivals"]
    assert arrivals == []
    arrivals = client.get("/api/v1/dataset-arrivals", headers=key_for(ADMIN)).json()["arrivals"]
    bench_uri = next(a["uri"] for a in arrivals if a["object_key"].endswith("churn.csv"))
    assert bench_uri.startswith("datasets/1/")  # the object key: no server path
    for path in ("/" + bench_uri, "/" + bench_uri.split("datasets/", 1)[1]):
        response = client.get(path, headers=contributor)
        assert response.status_code == 404 and SECRET_NOTE.format(0) not in response.text
