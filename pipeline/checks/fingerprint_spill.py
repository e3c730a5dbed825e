"""A fingerprint build's keys on disk: per-tier partition files, each made distinct on its own.

`pipeline.checks.fingerprint_files` computes every row's keys, a tier at a time; holding them all
(8 bytes a key, a few tiers, millions of rows) would cost hundreds of MB. They go instead to
partition files by their top bits, sorted in runs of SPILL_KEYS, and each partition is read back
alone to be made distinct and counted, in key order: a few MB at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO

import numpy as np

PARTITION_BITS = 5
SPILL_BUFFER_BYTES = 32 * 1024
# Keys of a tier are sorted and written to the partitions this many at a time.
SPILL_KEYS = 256 * 1024
# Partitions sorted at once when they are read back (each a few MB).
SORT_THREADS = 2


class KeySpill:
    """Per-tier partition files of keys (by their top bits), each sorted on its own later."""

    def __init__(self, folder: Path, tiers: int) -> None:
        self.folder = folder
        self.parts = 1 << PARTITION_BITS
        self.bounds = np.arange(1, self.parts, dtype=np.uint64) << np.uint64(64 - PARTITION_BITS)
        self.pending: list[list[np.ndarray]] = [[] for _ in range(tiers)]
        self.pending_rows = [0] * tiers
        self.files: list[list[IO[bytes]]] = [
            [self._path(t, p).open("wb", buffering=SPILL_BUFFER_BYTES) for p in range(self.parts)]
            for t in range(tiers)
        ]

    def _path(self, tier: int, part: int) -> Path:
        return self.folder / f"t{tier}-p{part}.u64"

    def add(self, tier: int, keys: np.ndarray) -> None:
        self.pending[tier].append(keys)
        self.pending_rows[tier] += len(keys)
        if self.pending_rows[tier] >= SPILL_KEYS:
            self._flush(tier)

    def _flush(self, tier: int) -> None:
        if not self.pending[tier]:
            return
        ordered = np.sort(np.concatenate(self.pending[tier]))
        self.pending[tier].clear()
        self.pending_rows[tier] = 0
        for part, chunk in enumerate(np.split(ordered, np.searchsorted(ordered, self.bounds))):
            if len(chunk):
                self.files[tier][part].write(chunk.tobytes())

    def close(self) -> None:
        for tier, files in enumerate(self.files):
            if not files[0].closed:
                self._flush(tier)
            for fh in files:
                fh.close()

    def distinct(self, tier: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each partition's distinct keys and their counts, in key order; SORT_THREADS sort
        at once (numpy's sort releases the GIL; after an upload's last byte, this is what the
        fingerprints wait for, on otherwise idle cores)."""
        with ThreadPoolExecutor(SORT_THREADS, thread_name_prefix="fingerprint-sort") as pool:
            running: deque[Future[tuple[np.ndarray, np.ndarray]]] = deque()
            for part in range(self.parts):
                running.append(pool.submit(self._distinct, tier, part))
                if len(running) >= SORT_THREADS:
                    yield running.popleft().result()
            while running:
                yield running.popleft().result()

    def _distinct(self, tier: int, part: int) -> tuple[np.ndarray, np.ndarray]:
        path = self._path(tier, part)
        keys = np.fromfile(path, dtype=np.uint64)
        path.unlink()
        return _distinct_counts(keys)


def _distinct_counts(part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(part, return_counts=True)` for a partition file: its keys are sorted runs
    (one per `KeySpill._flush`), which a stable sort (timsort) merges in a third of the time a
    full sort takes; the rest of a 480 MiB upload's fingerprints wait for these sorts."""
    part = np.sort(part, kind="stable")
    if not len(part):
        return part, np.zeros(0, dtype=np.intp)
    first = np.empty(len(part), dtype=bool)
    first[0] = True
    np.not_equal(part[1:], part[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return part[starts], np.diff(starts, append=len(part))
