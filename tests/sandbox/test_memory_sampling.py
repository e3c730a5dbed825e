"""The launcher samples the run's memory at least once a second, whatever a sample costs.

A trainer decides what a sample costs: forked children sharing a large buffer make every
sample walk their page tables (1 s of CPU for 41 processes sharing 1 GB). Paced by that cost
alone, samples came 20 s apart, time for each child to write its own copy of the buffer.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from pipeline.sandbox.runs import LAUNCHER, bwrap_path
from tests.sandbox.test_box_holds import reported
from tests.support.trainers import write_folder


def launcher() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sandbox_launcher", LAUNCHER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Child:
    """A child that runs until its tenth sample; the waits the launcher asked for."""

    pid = 4321

    def __init__(self) -> None:
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> int:
        assert timeout is not None
        self.waits.append(timeout)
        if len(self.waits) > 10:
            return 0
        raise subprocess.TimeoutExpired("bwrap", timeout)


def test_a_costly_sample_never_spaces_samples_more_than_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = launcher()
    clock = {"cpu": 0.0}

    def costly(pids: list[int]) -> int:
        clock["cpu"] += 1.0  # a second of page tables, under the limit
        return 100

    monkeypatch.setattr(module.time, "process_time", lambda: clock["cpu"])
    monkeypatch.setattr(module, "tree", lambda root: [root, root + 1])
    monkeypatch.setattr(module, "resident_bytes", lambda pids: 10**12)
    monkeypatch.setattr(module, "proportional_bytes", costly)
    child = Child()
    assert module._watch(child, 3600.0, 10**9) is None
    assert child.waits[0] == module.SAMPLE_SECONDS
    assert max(child.waits) <= 1.0


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")
def test_the_trainer_runs_below_the_launcher_s_priority(tmp_path: Path) -> None:
    """However many processes the trainer runs, the sampling launcher is scheduled first."""
    folder = write_folder(
        tmp_path / "model",
        """
        import os

        def fit(train, target):
            raise RuntimeError(f"found: {os.nice(0)}")
        """,
    )
    assert reported(folder) == min(19, os.nice(0) + 10)  # 19: the lowest priority
