"""A run folder the trainer could write all of (a Kubernetes pod, `TRAINER_PIPES_CLIENT=k8s`):
the service reads its launcher files and the box only as regular files of the folder.

There the launcher and the owner's code share a user, so `stderr.txt`, `status.json` and the
box itself may be links or pipes the owner's code made; the run worker, which holds the
service's secrets, must not read through them (`pipeline.sandbox.outcome`).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.outcome import read_outcome, stderr_tail
from pipeline.sandbox.runs import SandboxRun, TrainerJob
from tests.support.trainers import GOOD_TRAINER, LIMITS, cancer_split, write_folder

SECRET = "DATABASE_URL=postgresql://app:hunter2@db/marketplace"


@pytest.fixture
def run(tmp_path: Path) -> Iterator[SandboxRun]:
    train, bench = cancer_split()
    folder = write_folder(tmp_path / "model", GOOD_TRAINER)
    job = TrainerJob(folder, "train:fit", "target", train, bench.drop(columns=["target"]), False)
    run = SandboxRun(job, LIMITS, "none", root=tmp_path)
    yield run
    run.close()


def finished(run: SandboxRun, box: Path) -> None:
    """What a successful run leaves: the launcher's status, the harness's result, predictions."""
    (run.dir / "status.json").write_text(json.dumps({"returncode": 0}))
    (run.dir / "stderr.txt").write_text("fitting\n")
    (box / "result.json").write_text(json.dumps({"ok": True}))
    np.save(box / "predictions.npy", np.zeros(169, dtype=np.int64))


def test_a_regular_run_folder_is_read(run: SandboxRun) -> None:
    finished(run, run.box)
    assert read_outcome(run).values.shape == (169,)
    assert stderr_tail(run.dir) == "fitting"


def test_a_stderr_linked_to_a_secret_is_not_read(run: SandboxRun, tmp_path: Path) -> None:
    finished(run, run.box)
    secret = tmp_path / "environ"
    secret.write_text(SECRET)
    (run.dir / "stderr.txt").unlink()
    (run.dir / "stderr.txt").symlink_to(secret)
    assert stderr_tail(run.dir) == ""
    os.remove(run.box / "result.json")  # a failed run: its reason carries the stderr tail
    with pytest.raises(TrainerFailed) as caught:
        read_outcome(run)
    assert "hunter2" not in caught.value.describe()


def test_a_box_replaced_by_a_link_is_not_read(run: SandboxRun, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    finished(run, elsewhere)
    shutil.rmtree(run.box)
    run.box.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(TrainerFailed, match="wrote no result"):
        read_outcome(run)


def test_a_status_pipe_does_not_hold_the_worker(run: SandboxRun) -> None:
    finished(run, run.box)
    (run.dir / "status.json").unlink()
    os.mkfifo(run.dir / "status.json")  # opened for reading, a pipe waits for a writer
    caught: list[BaseException] = []

    def read() -> None:
        try:
            read_outcome(run)
        except BaseException as exc:  # handed to the test's thread
            caught.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert isinstance(caught[0], TrainerFailed) and "did not report" in caught[0].summary


@pytest.mark.parametrize(
    "status",
    [
        {"returncode": 1, "signal": "Payout blocked: mail your wallet seed"},
        {"returncode": "Payout blocked: mail your wallet seed", "signal": None},
        {"returncode": 1, "signal": ["SIGKILL"]},
    ],
)
def test_a_forged_status_names_no_owner_text(run: SandboxRun, status: dict[str, object]) -> None:
    """In a pod the trainer can write status.json: only a real signal and an integer code are
    taken from it."""
    finished(run, run.box)
    (run.box / "result.json").unlink()
    (run.dir / "status.json").write_text(json.dumps(status))
    with pytest.raises(TrainerFailed) as caught:
        read_outcome(run)
    assert "Payout" not in caught.value.describe()
    assert caught.value.summary.startswith("the training code exited with code")
