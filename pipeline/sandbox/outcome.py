"""What a sandboxed trainer run gave back: predictions checked outside, or why it failed.

Nothing the sandbox wrote is trusted: `result.json` and the prediction files are the trainer's,
read with size caps and without pickle, and checked against the benchmark's row count and the
task before any score is computed. `status.json` and `stderr.txt` are the launcher's, outside
the box under bubblewrap; in a Kubernetes pod (`TRAINER_PIPES_CLIENT=k8s`) the launcher and
the owner's code share one user, so there they are the trainer's too: a forged status can only
name a failure of the owner's own run. Every file is opened as a regular file of the run folder,
never through a symbolic link nor as a pipe (`_run_file`): the run worker must not read, on the
trainer's behalf, a file of its own (`/proc/self/environ`, a secret) into a failure's reason or
a prediction. A failure is a `TrainerFailed` (`pipeline.sandbox.errors`).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.runs import BOX, SandboxRun

TAIL_LINES = 20
TAIL_CHARS = 2000
RESULT_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class TrainerOutput:
    values: np.ndarray  # labels or values (n,), or probabilities (n, classes)
    classes: np.ndarray | None  # the model's classes_, with probabilities
    # As the trainer reported it (a figure for benchmarks and logs, never trusted for limits).
    cpu_seconds: float | None = None


@contextmanager
def _run_file(run_dir: Path, relative: str) -> Iterator[int]:
    """A descriptor of the regular file `relative` (e.g. "box/result.json") in a run folder.

    Each component is opened relative to the last with O_NOFOLLOW, so neither the file nor a
    folder on the way (the trainer may replace "box" in a pod) can lead elsewhere; O_NONBLOCK
    keeps a FIFO from blocking the open. OSError for anything but a regular file.
    """
    *folders, name = relative.split("/")
    opened: list[int] = []
    try:
        opened.append(os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY))  # made by the worker
        for folder in folders:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
            opened.append(os.open(folder, flags, dir_fd=opened[-1]))
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        opened.append(os.open(name, flags, dir_fd=opened[-1]))
        if not stat.S_ISREG(os.fstat(opened[-1]).st_mode):
            raise OSError(errno.EINVAL, f"{relative} is not a regular file")
        yield opened[-1]
    finally:
        for fd in reversed(opened):
            os.close(fd)


def stderr_tail(run_dir: Path) -> str:
    """The last lines of the run's stderr file, read from its end only."""
    try:
        with _run_file(run_dir, "stderr.txt") as fd:
            size = os.fstat(fd).st_size
            data = os.pread(fd, TAIL_CHARS * 4, max(0, size - TAIL_CHARS * 4))
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


def _json(run_dir: Path, relative: str) -> dict[str, Any] | None:
    try:
        with _run_file(run_dir, relative) as fd:
            if os.fstat(fd).st_size > RESULT_MAX_BYTES:
                return None
            data = json.loads(os.pread(fd, RESULT_MAX_BYTES, 0).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _raised(result: dict[str, Any], run: SandboxRun, tail: str) -> TrainerFailed:
    """The failure the harness reported: an exception of `fit` or `predict`."""
    error = str(result.get("error"))[:100]
    message = str(result.get("message", ""))[:500]
    limits = run.limits
    if error == "MemoryError" or "MemoryError" in tail:
        summary = f"memory limit of {limits.memory_mb} MB exceeded (MemoryError)"
    elif result.get("errno") == errno.EFBIG:
        summary = f"file size limit of {limits.file_size_mb} MB exceeded"
    else:
        return TrainerFailed(
            f"the training code raised {error}",
            f"the training code raised {error}: {message}",
            tail,
        )
    return TrainerFailed(summary, f"{summary}: {error}: {message}", tail)


def _stopped(status: dict[str, Any], run: SandboxRun, tail: str) -> TrainerFailed:
    """A run that ended without reporting an exception: killed, or exited on its own."""
    import signal

    limits = run.limits
    # In a pod the trainer can write status.json: only a real signal name and an integer code
    # are taken from it.
    signal_name = status.get("signal")
    if not (isinstance(signal_name, str) and signal_name in signal.Signals.__members__):
        signal_name = None
    code = status.get("returncode")
    code = code if isinstance(code, int) else None
    # bwrap reports a child killed by signal N as exit code 128 + N.
    if signal_name is None and code is not None and code > 128:
        try:
            signal_name = signal.Signals(code - 128).name
        except ValueError:
            signal_name = None
    if signal_name == "SIGXCPU" or "SIGXCPU" in tail:
        summary = f"CPU time limit of {limits.cpu_seconds} s exceeded"
    elif "MemoryError" in tail:
        summary = f"memory limit of {limits.memory_mb} MB exceeded (MemoryError)"
    elif signal_name == "SIGKILL":
        summary = (
            f"the training code was killed (SIGKILL): CPU time limit of {limits.cpu_seconds} s "
            f"or memory limit of {limits.memory_mb} MB"
        )
    elif signal_name:
        summary = f"the training code was killed by {signal_name}"
    else:
        summary = f"the training code exited with code {code} without a result"
    return TrainerFailed(summary, summary, tail)


def read_outcome(run: SandboxRun) -> TrainerOutput:
    """The run's predictions as written (unchecked but loaded safely), or TrainerFailed."""
    tail = stderr_tail(run.dir)
    status = _json(run.dir, "status.json")
    if status is None:
        raise TrainerFailed(
            "the sandbox launcher did not report: the run was interrupted", None, tail
        )
    if status.get("timed_out"):
        summary = f"wall time limit of {run.limits.wall_seconds} s exceeded: the run was killed"
        raise TrainerFailed(summary, summary, tail)
    if status.get("memory_exceeded"):
        summary = (
            f"memory limit of {run.limits.memory_mb} MB exceeded by the run's processes "
            "together: the run was killed"
        )
        raise TrainerFailed(summary, summary, tail)
    result = _json(run.dir, f"{BOX}/result.json")
    if status.get("returncode") != 0:
        if result is not None and result.get("ok") is False:
            raise _raised(result, run, tail)
        raise _stopped(status, run, tail)
    if result is None or result.get("ok") is not True:
        raise TrainerFailed("the training code wrote no result", None, tail)
    values = _load_array(run.dir, "predictions.npy", tail)
    classes = None
    if run.job.probabilities:
        classes = _load_array(run.dir, "classes.npy", tail)
    cpu = result.get("cpu_seconds")
    return TrainerOutput(values, classes, float(cpu) if isinstance(cpu, int | float) else None)


def _load_array(run_dir: Path, name: str, tail: str) -> np.ndarray:
    """A .npy file of the box without pickle: an object array is refused, a missing file (or
    anything but a regular file) is a failure."""
    try:
        with _run_file(run_dir, f"{BOX}/{name}") as fd:
            # Mapped through the descriptor already checked, never through the path again; the
            # mapping outlives the descriptor.
            return np.asarray(np.load(f"/proc/self/fd/{fd}", allow_pickle=False, mmap_mode="r"))
    except OSError:
        raise TrainerFailed(f"the training code wrote no {name}", None, tail) from None
    except ValueError as exc:
        raise TrainerFailed(
            "predictions of the wrong type: not numbers or text",
            f"predictions of the wrong type: {name} is not a plain array ({exc})",
            tail,
        ) from None
