"""The second demo model, `loan-default` (issue 17 §4): the owner's folder with a small
train.py, registered by `make run` as `marketplace models add DIR` registers a folder, and
trained only in the sandbox, deterministically."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import delete

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import Model
from pipeline.demo import DEMO_DIR
from pipeline.demo.loan_data import loan_rows
from pipeline.models.definitions import DEMO_LOAN_FOLDER
from pipeline.models.registry import seed_demo_models
from pipeline.sandbox.folders import extracted, pack_folder, trainer_key
from pipeline.sandbox.runner import OwnerTrainer, SubprocessRunner
from pipeline.sandbox.runs import bwrap_path
from pipeline.store.objectstore import LocalObjectStore
from tests.support.trainers import LIMITS

LOAN_FOLDER = DEMO_DIR / DEMO_LOAN_FOLDER


def test_the_loan_demo_is_registered_from_its_folder_as_models_add_does(
    settings: Settings, db: Database, cli: Any, client: Any
) -> None:
    store = LocalObjectStore(settings.objects_dir)
    with db.session() as session:
        session.execute(delete(Model))  # an empty store, as on a newcomer's first `make run`
    seeded = {m.name: (m.id, m.trainer, m.trainer_sha256) for m in seed_demo_models(db, store)}
    assert list(seeded) == ["customer-churn", "loan-default"]
    assert seeded["customer-churn"][1:] == (None, None)  # a listed estimator, no code
    archive, sha256 = pack_folder(LOAN_FOLDER)
    model_id, entry, stored = seeded["loan-default"]
    assert (entry, stored) == ("train:fit", sha256)
    with store.open(trainer_key(model_id, sha256)) as fh:
        assert fh.read() == archive

    # `marketplace models add` of the same folder finds the same model and the same code.
    status, out, _ = cli("models", "add", str(LOAN_FOLDER))
    assert status == 0, out
    assert f"folder sha256 {sha256}" in out and int(out.splitlines()[-1]) == model_id
    [view] = [m for m in client.get("/api/models").json() if m["name"] == "loan-default"]
    assert view["trainer"] == {"entry": "train:fit", "folder_sha256": sha256}
    status, out, _ = cli("models", "list")
    assert "loan-default\tclassification\ttarget=defaulted" in out
    assert f"trainer=train:fit@{sha256[:12]}" in out


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")
def test_the_loan_demo_trainer_learns_and_gives_the_same_predictions_twice() -> None:
    rows = pd.DataFrame(loan_rows(800, seed=3))
    train, bench = rows.iloc[:500], rows.iloc[500:].reset_index(drop=True)
    labels = bench["defaulted"].to_numpy()
    with extracted(pack_folder(LOAN_FOLDER)[0]) as folder:
        trainer = OwnerTrainer(folder, "train:fit", SubprocessRunner(), LIMITS, "bwrap")
        outputs = [
            trainer.predict(
                train,
                bench.drop(columns=["defaulted"]),
                target="defaulted",
                task_type="classification",
                probabilities=True,
                y_true=labels,
            )
            for _ in range(2)
        ]
    first, second = outputs
    np.testing.assert_array_equal(first.values, second.values)
    assert first.classes is not None and list(first.classes) == [0, 1]
    predicted = first.classes[first.values.argmax(axis=1)]
    majority = max(labels.mean(), 1 - labels.mean())
    assert (predicted == labels).mean() > majority + 0.05
