"""Each run's own cgroup holds its limits for the whole tree (docs/sandbox.md): run as root here
and in CI, where the service may make cgroups (v1 memory and pids here).

The launcher samples the tree's memory at most a second apart; a burst of forked children
shorter than that went unseen. In the run's cgroup the kernel kills at the limit itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from pipeline.sandbox import cgroups, runs
from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.outcome import read_outcome
from pipeline.sandbox.runner import SubprocessRunner
from pipeline.sandbox.runs import SandboxRun, bwrap_path
from tests.support.trainers import LIMITS, cancer_split, write_folder

PLACE = cgroups.locate(cgroups.AUTO)
needs_cgroup = pytest.mark.skipif(PLACE is None, reason="no cgroup can be made here")

MEMORY_MB = 1024
# Forked children that together pass the limit; the parent notes how each ended. The kernel
# kills a child at the limit and the parent lives on to write it down; the launcher's
# sampling, seeing the tree only between samples, kills the whole tree after.
BURST_TRAINER = """
import json, os, time

def fit(train, target):
    children = []
    for _ in range(6):
        pid = os.fork()
        if pid == 0:
            block = bytearray(250 * 1024 * 1024)
            block[:: 4096] = b"x" * len(block[:: 4096])
            time.sleep(0.5)
            os._exit(0)
        children.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    with open("codes.json", "w") as fh:
        json.dump(codes, fh)
    raise RuntimeError(f"found: {codes}")
"""
FORK_TRAINER = """
import os, time

def fit(train, target):
    started = 0
    for _ in range(30):
        try:
            if os.fork() == 0:
                time.sleep(5)
                os._exit(0)
            started += 1
        except OSError:
            break
    raise RuntimeError(f"found: {started}")
"""
HOLD_TRAINER = """
import os, time

def fit(train, target):
    for _ in range(6):
        if os.fork() == 0:
            block = bytearray(250 * 1024 * 1024)
            block[:: 4096] = b"x" * len(block[:: 4096])
            time.sleep(10)
            os._exit(0)
    time.sleep(10)
"""


def run(
    tmp_path: Path, code: str, isolation: str, **limits: object
) -> tuple[TrainerFailed, dict[str, object], list[str], object]:
    """The run's failure, its status.json, the cgroup folders it would have and the codes.json
    it left in its box, after it."""
    train, bench = cancer_split()
    job = runs.TrainerJob(
        write_folder(tmp_path / "model", code),
        "train:fit",
        "target",
        train,
        bench.drop(columns=["target"]),
        False,
    )
    sandbox = SandboxRun(job, dataclasses.replace(LIMITS, **limits), isolation)  # type: ignore[arg-type]
    groups = [os.path.join(entry["parent"], sandbox.dir.name) for entry in PLACE or []]
    try:
        SubprocessRunner().start(sandbox)
        status = json.loads((sandbox.dir / "status.json").read_text())
        codes = sandbox.box / "codes.json"
        noted = json.loads(codes.read_text()) if codes.exists() else None
        with pytest.raises(TrainerFailed) as caught:
            read_outcome(sandbox)
    finally:
        sandbox.close()
    return caught.value, status, groups, noted


@needs_cgroup
@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")
def test_a_burst_of_forked_children_past_the_limit_is_killed_by_the_kernel(
    tmp_path: Path,
) -> None:
    failed, status, groups, codes = run(tmp_path, BURST_TRAINER, "bwrap", memory_mb=MEMORY_MB)
    assert status["cgroup"] is True
    # Killed at the limit, before the tree held more: the parent saw it, the others ended.
    assert isinstance(codes, list) and -9 in codes and 0 in codes, codes
    assert failed.summary == (
        f"memory limit of {MEMORY_MB} MB exceeded by the run's processes together: "
        "the run was killed"
    )
    assert not any(os.path.exists(group) for group in groups)


@needs_cgroup
def test_the_process_limit_holds_without_bubblewrap(tmp_path: Path) -> None:
    """No RLIMIT_NPROC without bubblewrap's user namespace: the cgroup's pids.max holds."""
    failed, status, groups, _ = run(tmp_path, FORK_TRAINER, "none", processes=8)
    assert status["cgroup"] is True
    assert "found: " in failed.detail, failed.detail
    started = int(failed.detail.split("found: ", 1)[1].split()[0])
    assert started < 8 + cgroups.OWN_PROCESSES
    assert not any(os.path.exists(group) for group in groups)


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")
def test_without_a_cgroup_the_sampling_still_kills_the_tree(tmp_path: Path) -> None:
    failed, status, groups, _ = run(
        tmp_path, HOLD_TRAINER, "bwrap", memory_mb=MEMORY_MB, cgroup_root=cgroups.OFF
    )
    assert status["cgroup"] is False
    assert failed.summary.startswith(f"memory limit of {MEMORY_MB} MB exceeded")
    assert not any(os.path.exists(group) for group in groups)


@needs_cgroup
def test_groups_a_killed_launcher_left_are_removed_with_the_run(tmp_path: Path) -> None:
    """The launcher killed mid-run, its groups made and a process of the run in them: closing
    the run kills that process and removes the groups."""
    assert PLACE is not None
    train, bench = cancer_split()
    job = runs.TrainerJob(
        write_folder(tmp_path / "model", FORK_TRAINER),
        "train:fit",
        "target",
        train,
        bench.drop(columns=["target"]),
        False,
    )
    sandbox = SandboxRun(job, LIMITS, "none")
    folders = cgroups.make(PLACE, sandbox.dir.name, 256 * 1024 * 1024, 8)
    (sandbox.dir / cgroups.RECORD).write_text(json.dumps(folders))
    left = subprocess.Popen(["sleep", "60"])
    try:
        for folder in folders:
            with open(os.path.join(folder, "cgroup.procs"), "w") as fh:
                fh.write(str(left.pid))
        sandbox.close()
        assert left.wait(timeout=5) == -9
    finally:
        left.kill()
        cgroups.remove(folders)
    assert not any(os.path.exists(folder) for folder in folders)
    assert not sandbox.dir.exists()


def test_the_mechanism_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    runs.cgroup_place.cache_clear()
    with caplog.at_level("INFO", logger=runs.__name__):
        for _ in range(3):
            assert runs.cgroup_place(cgroups.OFF) is None
    said = [r.getMessage() for r in caplog.records if "trainer runs' memory" in r.getMessage()]
    assert said == ["trainer runs' memory and processes held by sampling and rlimits (no cgroup)"]
