"""Debouncing dataset arrivals into evaluation runs: the window, the cursor, the run key (spec §6).

Trailing edge from the first arrival (`DebounceCursor`): a model's first pending arrival opens a
window of `EVALUATION_DEBOUNCE_WINDOW_SECONDS`; every arrival for that model inside the window
joins the batch; once `now - first_seen >= window` the whole batch is released as ONE evaluation
run for the model's newest version in it. The next arrival opens a new window. A steady stream
of arrivals therefore yields one run per window (latency at most window + one sensor interval)
and never starves, which a "quiet for the whole window" rule would.

Pure logic, no I/O: the arrival sensor keeps the cursor as its JSON cursor.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.core.tables import isoformat_utc
from pipeline.triggers.arrival_keys import version_number

# Dagster's sensor ticks are about, not exactly, one interval apart: a window that is a whole
# number of intervals may close at the tick after the one it seems to.
TICK_JITTER_SECONDS = 1.0


def run_request_due(first_seen: datetime, window_seconds: float, poll_seconds: float) -> datetime:
    """By when the arrival sensor requests the run of a batch that opened at `first_seen`.

    The batch opens at the tick that recorded its first arrival; the sensor ticks about every
    `poll_seconds` after that and releases the batch at the first tick at least
    `window_seconds` later (the same tick when the window is 0).
    """
    if window_seconds <= 0:
        return first_seen
    ticks = math.ceil((window_seconds + TICK_JITTER_SECONDS) / poll_seconds)
    return first_seen + timedelta(seconds=ticks * poll_seconds)


def batch_run_key(model_id: int, versions: list[str]) -> str:
    """The same model and set of versions always give the same key, so a re-evaluated tick
    requests nothing new; a different batch of the same model gets a different key.

    It stays in the core, not with the sensor: it is stored on the batch's arrival rows
    (`DatasetArrival.run_key`), and `pipeline.intake.contributions.queue_wait` reads it to
    tell which arrivals went into the same run."""
    ordered = sorted(set(versions), key=version_number)
    digest = hashlib.sha256(",".join(ordered).encode()).hexdigest()[:12]
    return f"arrival-{model_id}-{ordered[-1]}-{digest}"


def _parse_time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError("time is not a string")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass
class PendingBatch:
    """A model's arrivals waiting for the end of their debounce window."""

    first_seen: datetime
    last_seen: datetime
    versions: list[str]

    @property
    def latest(self) -> str:
        return self.versions[-1]


@dataclass
class DebounceCursor:
    """Per-model pending batches; the arrival sensor's cursor (JSON), pure logic, no I/O.

    Trailing edge from the first arrival: a batch is due when `now - first_seen >= window`.
    """

    pending: dict[int, PendingBatch] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str | None) -> DebounceCursor:
        """Parse a cursor; None or "" is empty. ValueError when the text is not a cursor."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
            pending = {}
            for model, batch in data["pending"].items():
                versions = [str(v) for v in batch["versions"]]
                if not versions:
                    continue
                pending[int(model)] = PendingBatch(
                    first_seen=_parse_time(batch["first_seen"]),
                    last_seen=_parse_time(batch["last_seen"]),
                    versions=sorted(set(versions), key=version_number),
                )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a debounce cursor: {exc!r}") from None
        return cls(pending)

    def to_json(self) -> str:
        return json.dumps(
            {
                "pending": {
                    str(model): {
                        "first_seen": isoformat_utc(batch.first_seen),
                        "last_seen": isoformat_utc(batch.last_seen),
                        "versions": batch.versions,
                    }
                    for model, batch in sorted(self.pending.items())
                }
            },
            separators=(",", ":"),
        )

    def contains(self, model_id: int, version: str) -> bool:
        batch = self.pending.get(model_id)
        return batch is not None and version in batch.versions

    def add(self, model_id: int, version: str, seen_at: datetime) -> bool:
        """Add an arrival to its model's batch (opening one if none); False if already there."""
        batch = self.pending.get(model_id)
        if batch is None:
            self.pending[model_id] = PendingBatch(seen_at, seen_at, [version])
            return True
        batch.first_seen = min(batch.first_seen, seen_at)
        batch.last_seen = max(batch.last_seen, seen_at)
        if version in batch.versions:
            return False
        batch.versions = sorted([*batch.versions, version], key=version_number)
        return True

    def due(self, now: datetime, window_seconds: float) -> list[int]:
        """Models whose batch has reached the trailing edge of its window, in id order."""
        return sorted(
            model
            for model, batch in self.pending.items()
            if (now - batch.first_seen).total_seconds() >= window_seconds
        )

    def pop(self, model_id: int) -> PendingBatch:
        return self.pending.pop(model_id)
