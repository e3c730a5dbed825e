"""The integrity report is not an oracle for the benchmark (issue 21 row 5).

Before: 20 benchmark rows with their true labels, then the same rows with labels flipped, and
the job view answered `exact_benchmark_copies: 20` and then 0: a contributor learned which rows
are in the hidden benchmark and their labels. Now the submitter gets one coarse verdict,
whatever the labels, and at most INTEGRITY_LEAK_VERDICTS_PER_DAY of them a day per model; the
model's owner and the operators keep the figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from pipeline.checks import fingerprint_files
from pipeline.checks import fingerprints as fp
from pipeline.checks.benchmark_copies import count_benchmark_copies
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import REJECTED, Contribution, utcnow
from pipeline.models.registry import ModelOwner, get_model, set_model_owner
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.checks.test_integrity import build, split
from tests.intake.test_contributions import body
from tests.support.integrity import BENCHMARK_ROWS, register_bundled, rows_of
from tests.support.pipeline import WALLET_A, add_benchmark, contribute, job, manifest, run_pipeline

LEAKED = 20
OWNER = "olga"


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(settings, db=db, store=store)


@pytest.fixture
def cancer(db: Database, store: LocalObjectStore) -> tuple[int, pd.DataFrame, pd.DataFrame]:
    """The breast-cancer model, owned by OWNER, with a 250-row benchmark."""
    model_id, frame = register_bundled(db, "breast_cancer")
    with db.session() as session:
        set_model_owner(get_model(session, model_id), ModelOwner(user_id=OWNER))
    bench = frame.iloc[:BENCHMARK_ROWS].reset_index(drop=True)
    add_benchmark(db, store, rows_of(bench), model_id=model_id, target_column="target")
    return model_id, bench, frame.iloc[BENCHMARK_ROWS:].reset_index(drop=True)


def _flipped(frame: pd.DataFrame) -> pd.DataFrame:
    flipped = frame.copy()
    flipped["target"] = 1 - flipped["target"]
    return flipped


def _submit(svc: Services, model_id: int, frame: pd.DataFrame) -> str:
    job_id, version = contribute(
        svc.db, svc.store, rows_of(frame), model_id=model_id, with_manifest=manifest(WALLET_A)
    )
    run_pipeline(svc, version, model_id=model_id)
    return job_id


def _told(client: TestClient, headers: dict[str, str], model_id: int, job_id: str) -> Any:
    view = client.get(f"/api/models/{model_id}/contributions/{job_id}", headers=headers).json()
    for moving in ("jobId", "createdAt", "updatedAt"):
        view.pop(moving)
    view["quality"]["pii"].pop("seconds")  # how long the scan took
    return view


def test_flipping_the_labels_of_leaked_rows_does_not_change_what_the_submitter_is_told(
    svc: Services,
    db: Database,
    client: TestClient,
    auth_headers: Callable[..., dict[str, str]],
    platform_key: Callable[..., str],
    cancer: tuple[int, pd.DataFrame, pd.DataFrame],
) -> None:
    model_id, bench, rest = cancer
    honest = rest.iloc[:130]
    leaked = bench.iloc[:LEAKED]
    true_labels = _submit(svc, model_id, pd.concat([honest, leaked], ignore_index=True))
    flipped = _submit(svc, model_id, pd.concat([honest, _flipped(leaked)], ignore_index=True))

    alice = auth_headers("alice")
    told = _told(client, alice, model_id, true_labels)
    assert told == _told(client, alice, model_id, flipped)

    from pipeline.checks.disclosure import LEAKAGE_REASON

    assert told["status"] == REJECTED
    assert told["reason"] == LEAKAGE_REASON
    assert told["quality"]["integrity"] == {
        "verdict": "contains rows of the benchmark",
        "rows": 150,
        "known_rows": 0,
        "novel_rows": 150,
        "novel_share": 1.0,
        "label_check": "not measured",
    }
    assert "benchmark_copies" not in str(told) and "20" not in str(told["quality"]["integrity"])

    # The model's owner (and the operators, in the database and the Dagster UI) keep the counts.
    for job_id in (true_labels, flipped):
        figures = (job(db, job_id).quality or {})["integrity"]
        assert figures["verdict"] == "benchmark leakage"
        assert figures["benchmark_copies"] == figures["exact_benchmark_copies"] == LEAKED
        assert figures["detail"].startswith(f"benchmark leakage: {LEAKED} of 150 rows copy")
    url = f"/api/v1/models/{model_id}/contributions/{flipped}/integrity"
    owner = client.get(url, headers={"Authorization": f"Bearer {platform_key(OWNER)}"})
    assert owner.status_code == 200
    assert owner.json()["integrity"]["benchmark_copies"] == LEAKED
    assert owner.json()["submitterId"] == "alice"
    contributor = client.get(url, headers={"Authorization": f"Bearer {platform_key('alice')}"})
    assert contributor.status_code == 403


def test_matching_whatever_the_label_keeps_honest_rows_apart(tmp_path: Any) -> None:
    """Matching under any label does not turn honest rows into copies: on the dense churn-like
    tables too, the chance rates are measured the same way."""
    from pipeline.checks.benchmark_copies import AnyLabel, any_label_chance_rates

    for name in ("breast_cancer", "wine", "digits"):
        bench, rest = split(name)
        path = build(bench, tmp_path)
        with fingerprint_files.open_fingerprints(path) as fingerprints:
            scheme = fingerprints.scheme
            labels = pd.unique(fp.target_codes(scheme, bench))
            rates = any_label_chance_rates(fingerprints, bench, labels)
            for query, expected_leak in (
                (rest.iloc[:150], False),
                (_flipped(bench.iloc[:150]), True),
            ):
                if name != "breast_cancer" and expected_leak:
                    query = bench.iloc[:150].assign(target=bench["target"].iloc[::-1].values[:150])
                keys = fp.frame_keys(scheme, query)
                any_label = AnyLabel(fp.target_codes(scheme, query), labels, rates)
                leak = count_benchmark_copies(
                    keys, fingerprints, tolerance=0.01, version="v1", any_label=any_label
                )
                assert leak.leaked is expected_leak, (name, leak)


def test_a_supplier_whose_rows_keep_containing_the_benchmark_must_wait(
    client: TestClient,
    db: Database,
    settings: Settings,
    auth_headers: Callable[..., dict[str, str]],
) -> None:
    from pipeline.checks.disclosure import LEAKAGE_REASON

    def verdict(user: str, hours_ago: float) -> None:
        with db.session() as session:
            session.add(
                Contribution(
                    model_id=1,
                    submitter_id=user,
                    status=REJECTED,
                    reason=LEAKAGE_REASON,
                    submitted_rows=150,
                    created_at=utcnow() - timedelta(hours=hours_ago),
                )
            )

    verdict("alice", 30)  # more than a day ago: does not count
    for hours_ago in (5, 2, 1):
        verdict("alice", hours_ago)
    assert settings.integrity_leak_verdicts_per_day == 3
    url = "/api/models/1/contributions"
    refused = client.post(url, json=body(2), headers=auth_headers("alice"))
    assert refused.status_code == 429
    assert "contained rows of its benchmark" in refused.json()["detail"]
    retry_after = int(refused.headers["Retry-After"])
    assert 19 * 3600 - 60 <= retry_after <= 19 * 3600 + 60  # when the 5-hour-old one expires
    # Another supplier, or the same one below the limit, is not held up.
    assert client.post(url, json=body(2), headers=auth_headers("bob")).status_code == 202


def test_the_submitters_view_has_no_benchmark_figures() -> None:
    from pipeline.checks.disclosure import submitter_integrity

    figures = {
        "verdict": "passed",
        "rows": 150,
        "benchmark_copies": 3,
        "benchmark_copies_expected": 1.2,
        "benchmark_copies_allowed": 4,
        "exact_benchmark_copies": 1,
        "copy_rule": "near_0.5",
        "benchmark_version": "v1",
        "known_rows": 0,
        "novel_rows": 150,
        "novel_share": 1.0,
        "label_disagreement": 0.05,
        "reference_disagreement": 0.04,
        "label_reference": "benchmark",
        "label_check": "passed",
        "detail": None,
    }
    assert submitter_integrity(figures) == {
        "verdict": "passed",
        "rows": 150,
        "known_rows": 0,
        "novel_rows": 150,
        "novel_share": 1.0,
        "label_check": "passed",
    }
    leaked = submitter_integrity({**figures, "verdict": "benchmark leakage"})
    assert leaked is not None
    assert leaked["verdict"] == "contains rows of the benchmark"
    assert submitter_integrity(None) is None
