"""Fingerprint files: a reference's fingerprints built from a stream of record batches with
bounded memory, written as one file, and read back memory-mapped.

A file holds each tier's sorted, distinct keys (uint64), a JSON footer (the scheme: columns,
statistics, widths; rows; tier figures), the footer's length and a magic. Keys go to per-tier
partition files by their top bits and each partition is sorted on its own, so a 500 MB
benchmark needs a few MB of keys in memory at a time (`pipeline.checks.fingerprint_spill`).
Only keys and these statistics are kept, never values.

How often the reference's own rows match each other in a tier (its *chance rate*, measured on a
reservoir sample of `CHANCE_SAMPLE_ROWS` rows probed against the whole reference) says how much
a match means there: in a dense, low-dimensional table a coarse cell holds many honest rows.
`pipeline.checks.integrity` weighs matches by it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.checks.canonical_cells import (
    PARSE_IN_PYTHON_MAX,
    CanonicalColumn,
    canonical_batch,
)
from pipeline.checks.fingerprint_spill import KeySpill
from pipeline.checks.fingerprints import (
    SCHEME_VERSION,
    RowKeys,
    Scheme,
    row_keys,
    scheme_from_sample,
)
from pipeline.store.dataset_batches import RetypeColumns, file_batches

# Means and scales come from the first rows of the reference; chance rates from a reservoir.
STATS_ROWS = 20_000
CHANCE_SAMPLE_ROWS = 2_000
SAMPLE_SEED = 20_240_611
# Keys are computed on groups of at least this many rows (several reader batches): enough to
# pay the array operations' per-call cost once per group, and small enough that a group's cells
# and keys stay near 25 MB (64 Ki rows: 47 MB, no faster; the file is the same either way).
KEY_GROUP_ROWS = 16_384
MAGIC = b"MKFPRNT1"


@dataclass(frozen=True)
class TierSummary:
    name: str
    distinct: int
    chance_rate: float  # share of sampled reference rows matching another reference row


@dataclass(frozen=True)
class FingerprintSummary:
    scheme: Scheme
    rows: int
    tiers: tuple[TierSummary, ...]
    sample_rows: int

    def chance_rates(self) -> list[float]:
        return [t.chance_rate for t in self.tiers]

    def to_json(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme.to_json(),
            "rows": self.rows,
            "sample_rows": self.sample_rows,
            "tiers": [asdict(t) for t in self.tiers],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FingerprintSummary:
        return cls(
            Scheme.from_json(data["scheme"]),
            int(data["rows"]),
            tuple(
                TierSummary(str(t["name"]), int(t["distinct"]), float(t["chance_rate"]))
                for t in data["tiers"]
            ),
            int(data["sample_rows"]),
        )


class _Reservoir:
    """A uniform sample of CHANCE_SAMPLE_ROWS rows (algorithm R, seeded), kept as canonical
    cells: their keys are computed once, at the end (`keys`), not for every group of rows."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(SAMPLE_SEED)
        self.seen = 0
        # A column no row has is kept as missing cells: its keys are the same (see row_keys).
        self.cells: list[CanonicalColumn] | None = None

    def add(self, cells: Sequence[CanonicalColumn | None], rows: int) -> None:
        positions = np.arange(self.seen, self.seen + rows)
        self.seen += rows
        take_all = positions < CHANCE_SAMPLE_ROWS
        slot = np.where(take_all, positions, -1)
        later = ~take_all
        if later.any():
            draws = self.rng.integers(0, positions[later] + 1)
            slot[later] = np.where(draws < CHANCE_SAMPLE_ROWS, draws, -1)
        chosen = np.flatnonzero(slot >= 0)
        if not len(chosen):
            return
        picked = [
            c.take(chosen) if c is not None else CanonicalColumn.missing(len(chosen)) for c in cells
        ]
        targets = slot[chosen]
        first = take_all[chosen]  # the first CHANCE_SAMPLE_ROWS rows fill the slots in order
        if first.any():
            appended = [c.take(np.flatnonzero(first)) for c in picked]
            self.cells = appended if self.cells is None else _concat_columns(self.cells, appended)
            picked, targets = [c.take(np.flatnonzero(~first)) for c in picked], targets[~first]
        if self.cells is None or not len(targets):
            return
        # Later rows overwrite earlier ones in the same slot, as algorithm R does in order.
        for column, values in zip(self.cells, picked, strict=True):
            column.kind[targets] = values.kind
            column.number[targets] = values.number
            column.token[targets] = values.token

    def keys(self, scheme: Scheme) -> RowKeys | None:
        """The sampled rows' keys, with what probing needs."""
        return None if self.cells is None else row_keys(scheme, self.cells, probes=True)


def _concat_columns(
    a: Sequence[CanonicalColumn], b: Sequence[CanonicalColumn]
) -> list[CanonicalColumn]:
    return [
        CanonicalColumn(
            np.concatenate([x.kind, y.kind]),
            np.concatenate([x.number, y.number]),
            np.concatenate([x.token, y.token]),
        )
        for x, y in zip(a, b, strict=True)
    ]


def build_fingerprints(
    open_batches: Callable[[], Iterable[pa.RecordBatch]],
    *,
    columns: Sequence[str],
    target: str,
    classification: bool,
    out: Path,
    tmp_root: Path,
) -> FingerprintSummary:
    """Fingerprint every row of the batches into the file `out` (see the module docstring).

    `open_batches` starts the stream; a stream raising RetypeColumns is started again (once per
    column turned to text, once when all are, once by `pipeline.intake.relayed_batches`).
    """
    for _ in range(len(columns) + 3):
        try:
            return _build_once(
                open_batches(),
                columns=columns,
                target=target,
                classification=classification,
                out=out,
                tmp_root=tmp_root,
            )
        except RetypeColumns:
            continue
    raise RuntimeError("the batch source kept changing its column types")


def _build_once(
    batches: Iterable[pa.RecordBatch],
    *,
    columns: Sequence[str],
    target: str,
    classification: bool,
    out: Path,
    tmp_root: Path,
) -> FingerprintSummary:
    iterator = iter(batches)
    head, scheme = _scheme_from_head(iterator, columns, target, classification)
    tmp_root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="fingerprints-", dir=tmp_root))
    try:
        spill = KeySpill(folder, len(scheme.tiers))
        reservoir = _Reservoir()
        try:
            rows = _spill_keys(scheme, _chain(head, iterator), columns, spill, reservoir)
        finally:
            spill.close()
        head.clear()
        summary = _write(out, scheme, rows, spill, reservoir.keys(scheme))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return summary


def _scheme_from_head(
    iterator: Iterator[pa.RecordBatch], columns: Sequence[str], target: str, classification: bool
) -> tuple[list[pa.RecordBatch], Scheme]:
    """The first batches (at least STATS_ROWS rows, when there are) and the scheme they give."""
    head: list[pa.RecordBatch] = []
    seen = 0
    for batch in iterator:
        head.append(batch)
        seen += batch.num_rows
        if seen >= STATS_ROWS:
            break
    head_cells: list[CanonicalColumn | None] = [None] * len(columns)
    if head:
        head_cells = canonical_batch(pa.Table.from_batches(head), columns)
    present = [c if c is not None else CanonicalColumn.missing(seen) for c in head_cells]
    return head, scheme_from_sample(present, columns, target, classification)


def _spill_keys(
    scheme: Scheme,
    batches: Iterable[pa.RecordBatch],
    columns: Sequence[str],
    spill: KeySpill,
    reservoir: _Reservoir,
) -> int:
    """Every row's keys to the spill files, sampled into the reservoir; the rows seen."""
    rows = 0
    pending: list[pa.RecordBatch] = []
    pending_rows = 0

    def flush() -> None:
        if not pending_rows:
            return
        cells = _group_cells(pending, columns, pending_rows)
        pending.clear()
        keys = row_keys(scheme, cells)
        for tier in range(len(scheme.tiers)):
            spill.add(tier, keys.keys(tier))
        reservoir.add(cells, pending_rows)

    # Small reader blocks keep Arrow's memory low; keys are computed on groups of batches, so
    # the per-call cost of the array operations is paid once per group.
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        pending_rows += batch.num_rows
        rows += batch.num_rows
        if pending_rows >= KEY_GROUP_ROWS:
            flush()
            pending_rows = 0
    flush()
    return rows


def _group_cells(
    batches: Sequence[pa.RecordBatch], columns: Sequence[str], rows: int
) -> list[CanonicalColumn | None]:
    """The canonical cells of a group of batches, put in canonical form together: a CSV block
    is some thousands of rows, and each column's conversion costs some ten array operations
    whatever its length. A group of more than PARSE_IN_PYTHON_MAX rows is converted batch by
    batch: its text columns could then take Arrow's parse where each batch took Python's."""
    if len(batches) > 1 and rows <= PARSE_IN_PYTHON_MAX:
        with contextlib.suppress(pa.ArrowInvalid):  # batches of differing schemas: one by one
            return _concat_cells(
                [(canonical_batch(pa.Table.from_batches(batches), columns), rows)], rows
            )
    return _concat_cells(
        [(canonical_batch(batch, columns), batch.num_rows) for batch in batches], rows
    )


def _concat_cells(
    groups: Sequence[tuple[Sequence[CanonicalColumn | None], int]], rows: int
) -> list[CanonicalColumn | None]:
    """Each column's cells over several batches (None only when no batch has the column)."""
    columns: list[CanonicalColumn | None] = []
    for index in range(len(groups[0][0])):
        if all(cells[index] is None for cells, _ in groups):
            columns.append(None)
            continue
        present = [cells[index] or CanonicalColumn.missing(count) for cells, count in groups]
        if len(present) == 1:
            columns.append(present[0])
            continue
        columns.append(
            CanonicalColumn(
                np.concatenate([p.kind for p in present]),
                np.concatenate([p.number for p in present]),
                np.concatenate([p.token for p in present]),
            )
        )
    if all(c is None for c in columns):
        columns[0] = CanonicalColumn.missing(rows)
    return columns


def _write(
    out: Path, scheme: Scheme, rows: int, spill: KeySpill, sample: RowKeys | None
) -> FingerprintSummary:
    sample_n = sample.rows if sample is not None else 0
    summaries = []
    offsets = []
    with out.open("wb") as fh:
        for tier, name in enumerate(scheme.tiers):
            own_count = np.zeros(sample_n, dtype=np.int64)
            matched = np.zeros(sample_n, dtype=bool)
            probe_rows, probe_keys = _sample_probes(sample, tier)
            start = fh.tell()
            distinct = 0
            for keys, counts in spill.distinct(tier):
                fh.write(keys.tobytes())
                distinct += len(keys)
                if sample is not None and len(keys):
                    own = sample.keys(tier)
                    position = np.minimum(np.searchsorted(keys, own), len(keys) - 1)
                    hit = keys[position] == own
                    own_count[hit] += counts[position[hit]]
                    # Probe keys are sorted: only those in this partition's range.
                    lo = int(np.searchsorted(probe_keys, keys[0], side="left"))
                    hi = int(np.searchsorted(probe_keys, keys[-1], side="right"))
                    window = probe_keys[lo:hi]
                    position = np.minimum(np.searchsorted(keys, window), len(keys) - 1)
                    matched[probe_rows[lo:hi][keys[position] == window]] = True
            offsets.append({"offset": start, "count": distinct})
            rate = float(((own_count > 1) | matched).mean()) if sample_n else 0.0
            summaries.append(TierSummary(name, distinct, rate))
        summary = FingerprintSummary(scheme, rows, tuple(summaries), sample_n)
        footer = json.dumps({**summary.to_json(), "arrays": offsets}).encode()
        fh.write(footer)
        fh.write(len(footer).to_bytes(8, "little"))
        fh.write(MAGIC)
    return summary


def _sample_probes(sample: RowKeys | None, tier: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, key) of the sample rows' neighbouring-cell keys, other than their own key."""
    if sample is None or tier == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint64)
    probes = sample.probes(tier)
    others = probes != probes[:, :1]  # column 0 is the row's own cell
    rows = np.nonzero(others)[0].astype(np.int32)
    keys = probes[others]
    del probes, others
    order = np.argsort(keys)
    return rows[order], keys[order]


def _chain(first: Iterable[pa.RecordBatch], rest: Iterator[pa.RecordBatch]) -> Iterator[Any]:
    yield from first
    yield from rest


# --- reading a stored fingerprint file -------------------------------------------------------


class FingerprintFormatError(ValueError):
    """The bytes are not a fingerprint file of this scheme version."""


@dataclass
class Fingerprints:
    """An opened fingerprint file: its summary and each tier's sorted keys."""

    summary: FingerprintSummary
    tier_keys: list[np.ndarray]

    @property
    def scheme(self) -> Scheme:
        return self.summary.scheme


def read_footer(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size < 16:
            raise FingerprintFormatError("the file is too short")
        fh.seek(size - 16)
        tail = fh.read(16)
        if tail[8:] != MAGIC:
            raise FingerprintFormatError("not a fingerprint file")
        length = int.from_bytes(tail[:8], "little")
        if not 0 < length <= size - 16:
            raise FingerprintFormatError("bad footer length")
        fh.seek(size - 16 - length)
        meta: dict[str, Any] = json.loads(fh.read(length))
    if int(meta.get("scheme", {}).get("version", -1)) != SCHEME_VERSION:
        raise FingerprintFormatError("another scheme version")
    return meta


@contextlib.contextmanager
def open_fingerprints(path: Path) -> Iterator[Fingerprints]:
    """Memory-map a fingerprint file; its arrays are valid inside the `with` block only."""
    meta = read_footer(path)
    arrays: list[np.ndarray] = []
    for entry in meta["arrays"]:
        count = int(entry["count"])
        if count == 0:
            arrays.append(np.empty(0, dtype=np.uint64))
        else:
            arrays.append(
                np.memmap(
                    path, dtype=np.uint64, mode="r", offset=int(entry["offset"]), shape=(count,)
                )
            )
    try:
        yield Fingerprints(FingerprintSummary.from_json(meta), arrays)
    finally:
        arrays.clear()


def fingerprint_file(
    path: Path,
    file_format: str,
    *,
    columns: Sequence[str],
    target: str,
    classification: bool,
    out: Path,
    tmp_root: Path,
) -> FingerprintSummary:
    """Fingerprint a CSV/Parquet file (streamed) into the file `out`."""
    return build_fingerprints(
        file_batches(path, file_format, columns),
        columns=columns,
        target=target,
        classification=classification,
        out=out,
        tmp_root=tmp_root,
    )
