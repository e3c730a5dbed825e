"""What a sandboxed trainer run gave back: predictions checked outside, or why it failed.

Nothing the sandbox wrote is trusted: `status.json` is the launcher's (outside the box);
`result.json` and the prediction files are the trainer's, read with size caps and without
pickle, and checked against the benchmark's row count and the task before any score is
computed. A failure is a `TrainerFailed` (`pipeline.sandbox.errors`).
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.runs import SandboxRun

TAIL_LINES = 20
TAIL_CHARS = 2000
RESULT_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class TrainerOutput:
    values: np.ndarray  # labels or values (n,), or probabilities (n, classes)
    classes: np.ndarray | None  # the model's classes_, with probabilities
    # As the trainer reported it (a figure for benchmarks and logs, never trusted for limits).
    cpu_seconds: float | None = None


def stderr_tail(path: Path) -> str:
    """The last lines of a stderr file, read from its end only."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - TAIL_CHARS * 4))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = text.splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


def _json(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > RESULT_MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
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
    limits = run.limits
    signal_name = status.get("signal")
    code = status.get("returncode")
    # bwrap reports a child killed by signal N as exit code 128 + N.
    if signal_name is None and isinstance(code, int) and code > 128:
        import signal

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
    tail = stderr_tail(run.dir / "stderr.txt")
    status = _json(run.dir / "status.json")
    if status is None:
        raise TrainerFailed(
            "the sandbox launcher did not report: the run was interrupted", None, tail
        )
    if status.get("timed_out"):
        summary = f"wall time limit of {run.limits.wall_seconds} s exceeded: the run was killed"
        raise TrainerFailed(summary, summary, tail)
    result = _json(run.box / "result.json")
    if status.get("returncode") != 0:
        if result is not None and result.get("ok") is False:
            raise _raised(result, run, tail)
        raise _stopped(status, run, tail)
    if result is None or result.get("ok") is not True:
        raise TrainerFailed("the training code wrote no result", None, tail)
    values = _load_array(run.box / "predictions.npy", tail)
    classes = None
    if run.job.probabilities:
        classes = _load_array(run.box / "classes.npy", tail)
    cpu = result.get("cpu_seconds")
    return TrainerOutput(values, classes, float(cpu) if isinstance(cpu, int | float) else None)


def _load_array(path: Path, tail: str) -> np.ndarray:
    """A .npy file without pickle: an object array is refused, a missing file is a failure."""
    if not path.is_file():
        raise TrainerFailed(f"the training code wrote no {path.name}", None, tail)
    try:
        return np.asarray(np.load(path, allow_pickle=False, mmap_mode="r"))
    except ValueError as exc:
        raise TrainerFailed(
            "predictions of the wrong type: not numbers or text",
            f"predictions of the wrong type: {path.name} is not a plain array ({exc})",
            tail,
        ) from None
