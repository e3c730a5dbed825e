"""A run folder is removed whatever the trainer left in its box (docs/sandbox.md).

Run folders hold training rows. Where the service is not root (the trainer's files are the
service user's own), a folder the trainer made unreadable used to survive the clean-up; as
root nothing resists removal, so the test plays a service running as an unprivileged user.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

import pytest

from pipeline.sandbox.runs import TRAINER_ID, SandboxRun, TrainerJob
from tests.support.trainers import GOOD_TRAINER, LIMITS, cancer_split, write_folder


def lock_up(box: Path) -> None:
    """What a trainer can leave: folders without any permission, a read-only box."""
    deep = box / "locked" / "deeper"
    deep.mkdir(parents=True)
    (deep / "rows.csv").write_text("14.95,18.77\n")
    (deep / "rows.csv").chmod(0)
    deep.chmod(0)
    (box / "locked").chmod(0)
    (box / "no-write").mkdir()
    (box / "no-write" / "file").write_text("x")
    (box / "no-write").chmod(0o500)
    box.chmod(0o500)


def removed_as(uid: int, run: SandboxRun) -> bool:
    """The run folder (and the folder it is made in) handed to `uid`, then, in a child process
    running as `uid`, locked up by its "trainer" and closed; whether it is gone."""
    for path in [run.dir.parent, run.dir, *run.dir.rglob("*")]:
        os.chown(path, uid, uid)
    pid = os.fork()
    if pid == 0:  # the child only reports through its exit code
        code = 2
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            lock_up(run.box)
            run.close()
            code = 1 if os.path.lexists(run.dir) else 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 1)
    return os.WEXITSTATUS(status) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="plays an unprivileged service from root")
def test_a_run_folder_locked_up_by_the_trainer_is_removed(tmp_path: Path) -> None:
    train, bench = cancer_split()
    folder = write_folder(tmp_path / "model", GOOD_TRAINER)
    job = TrainerJob(folder, "train:fit", "target", train, bench.drop(columns=["target"]), False)
    runs_root = tmp_path / "runs"
    runs_root.mkdir()
    run = SandboxRun(job, LIMITS, "none", root=runs_root)
    # The unprivileged user must reach its run folder: pytest's temp folders are root's only.
    private = list(
        itertools.takewhile(
            lambda p: p != Path(tempfile.gettempdir()), [tmp_path, *tmp_path.parents]
        )
    )
    modes = {path: path.stat().st_mode for path in private}
    try:
        for path, mode in modes.items():
            path.chmod(mode | 0o111)
        assert removed_as(TRAINER_ID, run)
        assert list(runs_root.iterdir()) == []
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
