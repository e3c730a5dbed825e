"""Which Pipes messages of a trainer run reach the evaluation step's log, and how many are read.

The messages file is in the box: the owner's code can write anything there. Each message a
Pipes handler takes is a Dagster event, stored in the event log that operators and every
other step's readers see; training rows written there would leak, and a flood of them (20,000
lines gave 60,000 events and a 63 MB event log) kept the step reading long after the trainer
had stopped. So a `MessageGate`

- reads at most `MAX_MESSAGES` lines and `MAX_BYTES` bytes of a run (lines longer than
  `MAX_LINE_BYTES` are cut and count as read), and nothing after the run's deadline;
- hands over only what the harness itself sends, with no text of the trainer's: the first
  `opened` and `closed` (their parameters dropped: an exception's text is the trainer's) and
  the harness's two progress lines (`fitting train:fit on 200 rows`), whose shape carries
  numbers and the entry point only, each of bounded length and passed once (a trainer that
  writes lines of that shape cannot spell its rows out in 200 of them);
- counts the rest, so the step can say how many were left out (a count, never their text).

What the owner's code prints goes to its stderr file, read only for the owner's view of a
failure (`pipeline.sandbox.outcome`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

MAX_MESSAGES = 200
MAX_BYTES = 64 * 1024
MAX_LINE_BYTES = 4096
# The harness's progress lines (`pipeline/sandbox/harness.py`), and nothing else: names and
# numbers of bounded length (a trainer can write lines of this shape too, its rows for names),
# each kind passed once.
PROGRESS = {
    "fitting": re.compile(r"fitting [A-Za-z_][\w.]{0,99}:[A-Za-z_]\w{0,63} on \d{1,9} rows"),
    "fitted": re.compile(r"fitted in \d{1,6}\.\d s; predicting \d{1,9} rows"),
}


class MessageGate:
    """The messages of one run: `take` each line read, in order; `done` once reading stops."""

    def __init__(self, deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.deadline = deadline
        self.clock = clock
        self.lines = 0
        self.bytes = 0
        self.passed = 0
        self.capped = False
        self._seen: set[str] = set()

    @property
    def late(self) -> bool:
        return self.clock() >= self.deadline

    @property
    def done(self) -> bool:
        """Nothing more is read: a cap is reached, the deadline passed, or `closed` came."""
        return self.capped or self.late or "closed" in self._seen

    def take(self, line: bytes) -> dict[str, Any] | None:
        """The message to hand to Dagster for this line, or None (left out, counted)."""
        self.lines += 1
        self.bytes += len(line)
        if self.lines >= MAX_MESSAGES or self.bytes >= MAX_BYTES:
            self.capped = True
        message = _admitted(line, self._seen)
        if message is not None:
            self.passed += 1
            self._seen.add(message["method"])
        return message

    @property
    def left_out(self) -> int:
        return self.lines - self.passed

    def summary(self) -> str | None:
        """What the step's log says about the messages left out (counts only), or None."""
        if self.capped:
            return (
                f"the trainer wrote more than {MAX_MESSAGES} Pipes messages or {MAX_BYTES} "
                f"bytes: reading stopped there ({self.left_out} not logged)"
            )
        if self.late and "closed" not in self._seen:
            return "reading the trainer's Pipes messages stopped at the wall time limit"
        if self.left_out:
            return (
                f"{self.left_out} Pipes messages of the trainer not logged: only the harness's "
                "progress lines are"
            )
        return None


def _admitted(line: bytes, seen: set[str]) -> dict[str, Any] | None:
    if len(line) > MAX_LINE_BYTES or not line.endswith(b"\n"):
        return None
    try:
        message = json.loads(line)
        method = message["method"]
        params = message.get("params") or {}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(method, str) or not isinstance(params, dict) or "closed" in seen:
        return None
    version = message.get("__dagster_pipes_version")
    base = {"__dagster_pipes_version": version} if isinstance(version, str) else {}
    if method == "opened" and method not in seen:
        return {**base, "method": "opened", "params": {"extras": {}}}
    if method == "closed":
        return {**base, "method": "closed", "params": {}}
    text = params.get("message")
    if method != "log" or not isinstance(text, str):
        return None
    kind = next((k for k, shape in PROGRESS.items() if shape.fullmatch(text)), None)
    if kind is None or kind in seen:
        return None
    seen.add(kind)
    return {**base, "method": "log", "params": {"message": text, "level": "INFO"}}
