"""PII scan of whole files: every text value through the Arrow pre-filter, candidates to Presidio.

`PiiScanner` takes a file's text columns batch by batch (the upload intake feeds it while the
bytes arrive, the pipeline a whole table), so its memory does not grow with the file. Every
non-null text value meets the pre-filter (`pipeline.checks.pii_prefilter`); the distinct values
it passes are kept per column, and `report()` has Presidio (`pipeline.checks.pii`) confirm them
with only the recognizers of the entity types the pre-filter saw in each.

Presidio's cost is bounded by the candidates, and they are bounded too: at most MAX_SAMPLE_SIZE
distinct candidates are confirmed in all (a value holding many digit runs counts each run the
phone recognizer parses: `pii.confirm_cost`), shared fairly between the columns, and at most
CANDIDATE_CHAR_BUDGET characters are held. When a file has more, the confirmed ones are a
uniform sample of each column's distinct candidates over the whole file (bottom-k: those with
the smallest keyed hash), never its head, and the report says it was sampled. Reports name
columns and entity types with counts of distinct values, never the values themselves.

Number columns are scanned only when their name says they hold contact or payment numbers, and
then only their long whole values, as digit text (`pipeline.checks.pii_numbers`).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.checks import pii
from pipeline.checks.pii_nested import holds_nested_text, is_text_type, nested_text
from pipeline.checks.pii_numbers import is_number_type, long_numbers
from pipeline.checks.pii_prefilter import candidates, entities_of, gate_run_values, text_values
from pipeline.core.config import Settings

logger = logging.getLogger(__name__)

# Characters of candidate values held at once, over all columns: a file of long texts full of
# candidates must not fill the server's memory.
CANDIDATE_CHAR_BUDGET = 32 * 1024 * 1024

# Fixed so that the same file always yields the same sample and the same report.
SAMPLE_KEY = b"pii-sample-v1"

# Text gathered per column before one pre-filter pass: Arrow compiles the patterns on every call
# (about a millisecond), so a 1 MiB CSV block at a time would spend more on compiling than on
# matching.
PREFILTER_BYTES = 4 * 1024 * 1024
# ... or this many batches, whichever comes first: a dictionary column's batches are a few
# distinct values each, and small arrays held until the end of a file pin the heap's pages.
PREFILTER_BATCHES = 64

# A column whose first pass holds fewer than one distinct value in this many is matched by its
# distinct values (pc.value_counts) rather than row by row.
REPETITIVE_RATIO = 4

# Pending text up to this size is matched as one array (far below string offsets' 2 GiB).
CONCAT_MAX_BYTES = 1 << 30

# A column whose first pass passes fewer than one value in this many is pre-filtered through the
# one-pass gate afterwards (`pii_prefilter.GATE`).
GATED_RATIO = 64


@dataclass(frozen=True)
class PiiReport:
    """What a scan found: per column, per entity type, the number of distinct values holding it."""

    findings: dict[str, dict[str, int]] = field(default_factory=dict)  # only columns with hits
    scanned_columns: tuple[str, ...] = ()
    scanned_values: int = 0  # every non-null text value: all met the pre-filter
    candidate_values: int = 0  # of those, how many the pre-filter passed
    confirmed_values: int = 0  # distinct candidates Presidio checked
    sampled: bool = False  # more distinct candidates than MAX_SAMPLE_SIZE: a uniform sample
    seconds: float = 0.0
    skipped: bool = False  # ENABLE_PII_DETECTION was off: nothing was looked at

    @property
    def found(self) -> bool:
        return any(self.findings.values())

    @property
    def entity_types(self) -> list[str]:
        return sorted({entity for counts in self.findings.values() for entity in counts})

    def summary(self) -> str:
        """A sentence safe for responses and logs: column names and entity types, no values."""
        if self.skipped:
            return "PII detection is disabled"
        if not self.found:
            return f"no PII found in {self.scanned_values} text values"
        parts = []
        for column, counts in self.findings.items():
            kinds = ", ".join(f"{entity} ({n})" for entity, n in counts.items())
            parts.append(f"{column}: {kinds}")
        return f"PII found in {len(parts)} column(s): " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "findings": {column: dict(counts) for column, counts in self.findings.items()},
            "scanned_columns": list(self.scanned_columns),
            "scanned_values": self.scanned_values,
            "candidate_values": self.candidate_values,
            "confirmed_values": self.confirmed_values,
            "sampled": self.sampled,
            "seconds": round(self.seconds, 3),
            "skipped": self.skipped,
        }


class _ColumnCandidates:
    """One column's distinct candidates with the smallest keys (bottom-k), within a char budget."""

    def __init__(self, limit: int, char_budget: int) -> None:
        self.limit = limit
        self.char_budget = char_budget
        self.chars = 0
        self.bits: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []  # (-key, value): the largest key on top
        self.dropped = False

    def offer(self, value: str, bits: int) -> None:
        if value in self.bits:
            return
        key = _sample_key(value)
        if self._over(1, len(value)) and (not self._heap or key >= -self._heap[0][0]):
            self.dropped = True
            return
        self.bits[value] = bits
        self.chars += len(value)
        heapq.heappush(self._heap, (-key, value))
        self.shrink(self.char_budget)

    def shrink(self, char_budget: int) -> None:
        """Hold at most `char_budget` characters from now on (evicting the largest keys)."""
        self.char_budget = char_budget
        while self._heap and self._over(0, 0):
            _, evicted = heapq.heappop(self._heap)
            del self.bits[evicted]
            self.chars -= len(evicted)
            self.dropped = True

    def smallest(self, count: int) -> list[str]:
        """The `count` values with the smallest keys: a uniform sample of all distinct ones."""
        return [value for _, value in heapq.nlargest(count, self._heap)]

    def _over(self, more_values: int, more_chars: int) -> bool:
        return (
            len(self.bits) + more_values > self.limit or self.chars + more_chars > self.char_budget
        )


def _repetitive(column: pa.ChunkedArray) -> bool:
    """Fewer than one distinct value in four (counting them costs about a tenth of a pass)."""
    return bool(pc.count_distinct(column).as_py() * REPETITIVE_RATIO < len(column))


def _sample_key(value: str) -> int:
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8, key=SAMPLE_KEY)
    return int.from_bytes(digest.digest(), "big")


class PiiScanner:
    """Feed text columns batch by batch with `add`, then `report()` (see the module doc)."""

    def __init__(self, settings: Settings, columns: Sequence[str]) -> None:
        self.settings = settings
        self.columns = list(columns)
        self.scanned = 0
        self.candidate_count = 0
        self.seconds = 0.0
        # Made for a column at its first candidate: a file may have 50,000 columns.
        self._candidates: dict[str, _ColumnCandidates] = {}
        # Per column: text arrays, each with how many rows hold each value (None: one each).
        self._pending: dict[str, list[tuple[pa.Array, np.ndarray | None]]] = {
            name: [] for name in self.columns
        }
        self._pending_bytes = dict.fromkeys(self.columns, 0)
        self._repetitive: dict[str, bool] = {}  # decided on each column's first pass
        self._gated: dict[str, int] = {}  # likewise: the gate's run length; 0: not gated

    def add_column(self, name: str) -> None:
        """Scan column `name` too (a CSV column that turns to text below the file's head); the
        columns share the candidate characters' budget again."""
        if name in self._pending:
            return
        self.columns.append(name)
        for store in self._candidates.values():
            store.shrink(self._share())
        self._pending[name] = []
        self._pending_bytes[name] = 0

    def add(self, name: str, column: pa.Array | pa.ChunkedArray) -> None:
        """Pre-filter one batch of column `name`: a text or dictionary-of-text array, nested or
        binary values (their text leaves and contact-number leaves: `pii_nested`), or numbers
        (of a column `holds_contact_numbers` names), whose long ones are scanned as text."""
        started = time.perf_counter()
        if is_number_type(column.type):
            column = long_numbers(column)
        elif holds_nested_text(column.type, name):
            column = nested_text(column, name)
        elif not is_text_type(column.type):  # a "phone" column of booleans or dates
            return
        self.scanned += len(column) - column.null_count
        values, rows = text_values(column)
        self._pending[name].append((values, rows))
        self._pending_bytes[name] += values.nbytes
        pending = self._pending[name]
        if self._pending_bytes[name] >= PREFILTER_BYTES or len(pending) >= PREFILTER_BATCHES:
            self._prefilter(name)
        self.seconds += time.perf_counter() - started

    def _prefilter(self, name: str) -> None:
        pending, self._pending[name], self._pending_bytes[name] = self._pending[name], [], 0
        if not pending:
            return
        arrays = [values for values, _ in pending]
        if len({array.type for array in arrays}) > 1:
            arrays = [array.cast(pa.large_string()) for array in arrays]
        column: pa.Array | pa.ChunkedArray = pa.chunked_array(arrays)
        if len(arrays) > 1 and column.nbytes < CONCAT_MAX_BYTES:
            # RE2 starts a new DFA for every chunk (about a millisecond for the gate), and a CSV
            # block is only some thousands of values: one array halves the pre-filter's time.
            column = column.combine_chunks()
        counts = None
        if any(rows is not None for _, rows in pending):
            # Dictionary columns came as the distinct values of each batch, with their rows.
            counts = pa.array(
                np.concatenate(
                    [
                        rows if rows is not None else np.ones(len(values), dtype=np.int64)
                        for values, rows in pending
                    ]
                ).astype(np.int64)
            )
        elif name not in self._repetitive:  # counting distinct values costs a tenth of a pass
            self._repetitive[name] = _repetitive(column)
        if counts is None and self._repetitive[name]:
            # Categories and codes: matching each distinct value once is cheaper than each row.
            tally = pc.value_counts(column)
            column, counts = tally.field("values"), tally.field("counts")
        run_values = self._gated.get(name, 0)
        found, bits, passed = candidates(
            column, counts, gated=run_values > 0, run_values=run_values
        )
        if name not in self._gated:
            values = len(column) if counts is None else int(pc.sum(counts).as_py() or 0)
            gated = passed * GATED_RATIO < values
            self._gated[name] = gate_run_values(passed / max(1, values)) if gated else 0
        self.candidate_count += passed
        if len(found) == 0:
            return
        store = self._candidates.get(name)
        if store is None:
            store = _ColumnCandidates(self.settings.max_sample_size, self._share())
            self._candidates[name] = store
        for value, mask in zip(found.to_pylist(), bits.tolist(), strict=True):
            store.offer(value, mask)

    def _share(self) -> int:
        """Each column's share of the candidates' character budget."""
        return CANDIDATE_CHAR_BUDGET // max(1, len(self.columns))

    def flush(self) -> None:
        """Pre-filter the text still gathered (`report` does it first)."""
        started = time.perf_counter()
        for name in self.columns:
            self._prefilter(name)
        self.seconds += time.perf_counter() - started

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Every column of `batch` that this scanner was made for."""
        for name in self.columns:
            index = batch.schema.get_field_index(name)
            if index >= 0:
                self.add(name, batch.column(index))

    def report(self) -> PiiReport:
        """Confirm the candidates with Presidio; the findings per column and entity type."""
        self.flush()
        started = time.perf_counter()
        names = [name for name in self.columns if name in self._candidates]  # column order
        stores = [self._candidates[name] for name in names]
        # Each column's candidates in sample order (smallest key first) with what confirming
        # each costs: a long text full of digit runs costs as much as that many short values,
        # so the bound is on the candidates Presidio parses, not on the values holding them.
        ordered = [store.smallest(len(store.bits)) for store in stores]
        costs = [
            np.cumsum([pii.confirm_cost(v, entities_of(s.bits[v])) for v in vals], dtype=np.int64)
            for s, vals in zip(stores, ordered, strict=True)
        ]
        quotas = _fair_quotas(
            [int(c[-1]) if len(c) else 0 for c in costs], self.settings.max_sample_size
        )
        values: list[str] = []
        owners: list[str] = []
        truncated = False
        for name, vals, cost, quota in zip(names, ordered, costs, quotas, strict=True):
            chosen = vals[: int(np.searchsorted(cost, quota, side="right"))]
            truncated |= len(chosen) < len(vals)
            values.extend(chosen)
            owners.extend([name] * len(chosen))
        entities = [
            entities_of(self._candidates[owner].bits[value])
            for owner, value in zip(owners, values, strict=True)
        ]
        found = pii.confirm(values, entities, self.settings.batch_size) if values else []
        findings: dict[str, dict[str, int]] = {}
        for owner, kinds in zip(owners, found, strict=True):
            for entity in kinds:
                counts = findings.setdefault(owner, {})
                counts[entity] = counts.get(entity, 0) + 1
        sampled = any(s.dropped for s in stores) or truncated
        report = PiiReport(
            findings={name: dict(sorted(c.items())) for name, c in findings.items()},
            scanned_columns=tuple(self.columns),
            scanned_values=self.scanned,
            candidate_values=self.candidate_count,
            confirmed_values=len(values),
            sampled=sampled,
            seconds=self.seconds + time.perf_counter() - started,
        )
        logger.info(
            "%s (%d values, %d candidates, %d confirmed%s, %.2f s)",
            report.summary(),
            report.scanned_values,
            report.candidate_values,
            report.confirmed_values,
            ", sampled" if sampled else "",
            report.seconds,
        )
        return report


def _fair_quotas(sizes: Sequence[int], budget: int) -> list[int]:
    """Share `budget` between columns: none gets more than it has, the rest go to bigger ones."""
    quotas = [0] * len(sizes)
    remaining = budget
    left = len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i]):
        quotas[index] = min(sizes[index], remaining // left)
        remaining -= quotas[index]
        left -= 1
    return quotas
