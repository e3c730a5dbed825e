"""The box holds whoever starts the service (docs/sandbox.md): run as root here and in CI.

Owner code gets no capability, an unprivileged uid inside and outside its namespaces, no user
namespace of its own, and limits that hold for its whole process tree: memory, processes and
/dev/shm. Each test is a tiny train.py reporting what it managed by raising.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import secrets
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.sandbox import runs
from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.outcome import read_outcome
from pipeline.sandbox.runner import OwnerTrainer, SubprocessRunner
from pipeline.sandbox.runs import SHM_MB, TRAINER_ID, SandboxRun, bwrap_path
from tests.support.trainers import (
    GOOD_TRAINER,
    LIMITS,
    cancer_split,
    run_trainer,
    write_folder,
)

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")


class OwnersOfTheBox(SubprocessRunner):
    """The plain runner, noting who owns each file of the box once the run is over."""

    def __init__(self) -> None:
        self.owners: dict[str, int] = {}

    def start(self, run: SandboxRun) -> None:
        super().start(run)
        self.owners = {path.name: path.stat().st_uid for path in run.box.iterdir()}


def training() -> tuple[pd.DataFrame, pd.DataFrame]:
    train, bench = cancer_split()
    return train, bench.drop(columns=["target"])


def reported(folder: Path, limits: runs.SandboxLimits = LIMITS) -> object:
    """What the trainer reported in the message of the exception it raised."""
    with pytest.raises(TrainerFailed) as caught:
        run_trainer(folder, limits=limits)
    detail = caught.value.detail
    assert "found: " in detail, detail
    return ast.literal_eval(detail.split("found: ", 1)[1])


def test_owner_code_cannot_remount_the_service_packages_nor_gain_privileges(
    tmp_path: Path,
) -> None:
    """The probe of issue 34: as root, bwrap gave the trainer full capabilities, and it
    remounted the read-only bind of site-packages read-write and wrote into it."""
    site_dir = runs.python_paths()[1][0]
    probe = Path(site_dir) / f"mk-sandbox-probe-{secrets.token_hex(8)}.txt"
    folder = write_folder(
        tmp_path / "model",
        f"""
        import ctypes, os

        MS_REMOUNT, MS_BIND, CLONE_NEWUSER = 32, 4096, 0x10000000

        def fit(train, target):
            libc = ctypes.CDLL(None, use_errno=True)
            status = dict(line.split(":", 1) for line in open("/proc/self/status"))
            found = {{"CapEff": status["CapEff"].strip(), "CapBnd": status["CapBnd"].strip()}}
            found["uid"] = os.getuid()
            open("made-by-the-trainer", "w").close()
            found["remounted"] = libc.mount(None, {site_dir!r}.encode(), None,
                                            MS_REMOUNT | MS_BIND, None) == 0
            try:
                with open({str(probe)!r}, "w") as fh:
                    fh.write("import sys")
                found["wrote"] = True
            except OSError:
                found["wrote"] = False
            found["setuid_root"] = libc.setuid(0) == 0
            found["unshared"] = libc.unshare(CLONE_NEWUSER) == 0
            raise RuntimeError(f"found: {{found!r}}")
        """,
    )
    runner = OwnersOfTheBox()
    try:
        with pytest.raises(TrainerFailed) as caught:
            OwnerTrainer(folder, "train:fit", runner, LIMITS, "bwrap").predict(
                *training(),
                target="target",
                task_type="classification",
                probabilities=False,
                y_true=np.zeros(169),
            )
    finally:
        written = probe.exists()
        probe.unlink(missing_ok=True)
    # Seen from outside: the trainer's file belongs to an unprivileged user, never to root.
    assert runner.owners["made-by-the-trainer"] == (
        TRAINER_ID if os.geteuid() == 0 else os.geteuid()
    )
    assert ast.literal_eval(caught.value.detail.split("found: ", 1)[1]) == {
        "CapEff": "0000000000000000",
        "CapBnd": "0000000000000000",
        "uid": TRAINER_ID,
        "remounted": False,
        "wrote": False,
        "setuid_root": False,
        "unshared": False,
    }
    assert not written


def test_forked_children_share_one_memory_limit(tmp_path: Path) -> None:
    """Issue 34: four children of 1,024 MB each (RLIMIT_AS is per process) reached 1,446 MB."""
    limits = dataclasses.replace(LIMITS, memory_mb=1024)
    folder = write_folder(
        tmp_path / "model",
        """
        import os, time

        def fit(train, target):
            children = []
            for _ in range(4):
                pid = os.fork()
                if pid == 0:
                    hoard = b"x" * (400 * 1024 * 1024)
                    time.sleep(10)
                    os._exit(0)
                children.append(pid)
            for pid in children:
                os.waitpid(pid, 0)
            raise RuntimeError("found: 'all four children ran to their end'")
        """,
    )
    with pytest.raises(TrainerFailed) as caught:
        run_trainer(folder, limits=limits)
    assert caught.value.summary == (
        "memory limit of 1024 MB exceeded by the run's processes together: the run was killed"
    )


def test_pages_shared_after_a_fork_count_once(tmp_path: Path) -> None:
    """700 MB, then five forked children that only read it: over 5 GB resident in sum, under
    1 GB in fact. The run's memory is the tree's proportional size: under 4,096 MB."""
    limits = dataclasses.replace(LIMITS, memory_mb=4096)
    folder = write_folder(
        tmp_path / "model",
        GOOD_TRAINER
        + """
import os, time

_fit = fit

def fit(train, target):
    shared = b"x" * (700 * 1024 * 1024)
    children = []
    for _ in range(5):
        pid = os.fork()
        if pid == 0:
            time.sleep(2)
            os._exit(0 if shared[-1:] == b"x" else 1)
        children.append(pid)
    assert all(os.waitpid(pid, 0)[1] == 0 for pid in children)
    return _fit(train, target)
""",
    )
    assert run_trainer(folder, limits=limits).shape == (169,)


def test_process_count_is_capped_for_the_whole_run(tmp_path: Path) -> None:
    """Issue 34: 300 processes were allowed."""
    folder = write_folder(
        tmp_path / "model",
        """
        import os, signal, time

        def fit(train, target):
            children = []
            try:
                for _ in range(150):
                    pid = os.fork()
                    if pid == 0:
                        time.sleep(30)
                        os._exit(0)
                    children.append(pid)
            except OSError:
                pass
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            raise RuntimeError(f"found: {len(children)}")
        """,
    )
    started = reported(folder)
    assert isinstance(started, int) and 0 < started < LIMITS.processes


def test_dev_shm_is_capped(tmp_path: Path) -> None:
    """Issue 34: 240 MB went into /dev/shm while /tmp stopped at its cap. Files of 32 MB each,
    below the file-size limit of the tests (64 MB): only the folder's own cap can stop them."""
    folder = write_folder(
        tmp_path / "model",
        """
        def fit(train, target):
            written = 0
            try:
                for n in range(4):
                    with open(f"/dev/shm/hoard-{n}", "wb") as fh:
                        for _ in range(32):
                            fh.write(b"x" * (1024 * 1024))
                            fh.flush()
                            written += 1
            except OSError:
                pass
            raise RuntimeError(f"found: {written}")
        """,
    )
    written_mb = reported(folder)
    assert isinstance(written_mb, int) and written_mb <= SHM_MB


def test_a_sandbox_that_cannot_start_says_why(tmp_path: Path) -> None:
    """bubblewrap gone between the run's preparation and its start: the launcher still reports,
    and the reason is in the run's stderr (the owner's view), not a missing status."""
    train, features = training()
    job = runs.TrainerJob(
        write_folder(tmp_path / "model", GOOD_TRAINER),
        "train:fit",
        "target",
        train,
        features,
        False,
    )
    run = SandboxRun(job, LIMITS, "bwrap")
    try:
        launch = json.loads((run.dir / "launch.json").read_text())
        launch["command"][0] = str(tmp_path / "no-such-bwrap")
        (run.dir / "launch.json").write_text(json.dumps(launch))
        SubprocessRunner().start(run)
        with pytest.raises(TrainerFailed) as caught:
            read_outcome(run)
    finally:
        run.close()
    assert caught.value.summary == "the training code exited with code 127 without a result"
    assert "could not start the sandbox" in caught.value.stderr_tail
