"""The owner's text never reaches a contributor (issue 34, case 6): a hostile train.py, run in
the real sandbox, puts a phishing message and training rows in every channel it has (its
exception's class name and message, stderr, the limit it chooses to hit, predictions the
checks refuse); the contributor's job reason and job view are a fixed text, the owner's view
keeps what the code said.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import FAILED, QUEUED, Model, RewardEntry
from pipeline.intake.contributions import contribution_view
from pipeline.sandbox.errors import CONTRIBUTOR_TEXT
from pipeline.sandbox.runs import bwrap_path
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import WALLET_A, add_benchmark, contribute, job, manifest, run_pipeline
from tests.support.trainers import owner_model

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")

PHISHING = "Payout blocked: mail your wallet seed to payouts@evil.example"

# The exception's class name is the phishing line and the first training row; its message,
# and stderr, carry more rows.
RAISES = f"""
import sys

def fit(train, target):
    row = ",".join(str(v) for v in train.iloc[0].tolist())
    print({PHISHING!r} + "; stderr rows " + train.head(3).to_csv(index=False), file=sys.stderr)
    name = {PHISHING!r} + "; row " + row
    raise type(name, (Exception,), {{}})("message rows " + train.head(5).to_csv(index=False))
"""

# Predictions the checks refuse, whose wrong length spells the row count the owner chose.
WRONG_LENGTH = f"""
import sys

class Model:
    def predict(self, frame):
        print({PHISHING!r}, file=sys.stderr)
        return [0] * 7

def fit(train, target):
    return Model()
"""


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(settings, db=db, store=store)


def _contributor_sees(db: Database, job_id: str) -> str:
    """Everything the job's submitter reads: the job view of GET …/contributions/{jobId}."""
    return json.dumps(contribution_view(job(db, job_id)))


FIXED = f"not evaluated: {CONTRIBUTOR_TEXT}; not the contribution's fault, nothing charged"


def _first_run(
    svc: Services, db: Database, store: LocalObjectStore, tmp_path: Path, code: str
) -> tuple[int, str, str]:
    """A contribution valued by `code` once: the contributor reads the fixed text only.
    (model id, job id, version)"""
    model_id = owner_model(db, store, tmp_path, code)
    add_benchmark(db, store, model_id=model_id)
    job_id, version = contribute(db, store, model_id=model_id, with_manifest=manifest(WALLET_A))

    run_pipeline(svc, version, model_id=model_id)

    row = job(db, job_id)
    assert row.status == QUEUED
    assert row.reason == f"{FIXED}; queued again"
    seen = _contributor_sees(db, job_id)
    for owner_text in ("Payout", "wallet seed", "evil.example", "message rows", "stderr rows"):
        assert owner_text not in seen
    assert "Exception" not in seen and "predictions" not in seen
    return model_id, job_id, version


def test_an_exception_s_name_and_message_reach_the_owner_only(
    svc: Services, db: Database, store: LocalObjectStore, tmp_path: Path
) -> None:
    model_id, job_id, version = _first_run(svc, db, store, tmp_path, RAISES)
    # The owner's view (marketplace models list, Dagster) keeps what the code said.
    with db.session() as session:
        model = session.get(Model, model_id)
        assert model is not None and PHISHING in (model.trainer_failure or "")

    run_pipeline(svc, version, model_id=model_id)

    row = job(db, job_id)
    assert row.status == FAILED
    assert row.reason == f"{FIXED}; given back 2 times, so it is not retried"
    assert "Payout" not in _contributor_sees(db, job_id)
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(RewardEntry)) == 0


def test_what_the_prediction_checks_found_reaches_the_owner_only(
    svc: Services, db: Database, store: LocalObjectStore, tmp_path: Path
) -> None:
    model_id, _, _ = _first_run(svc, db, store, tmp_path, WRONG_LENGTH)
    with db.session() as session:
        model = session.get(Model, model_id)
        assert model is not None
        assert "returned 7 predictions" in (model.trainer_failure or "")
