"""One CSV parse for the checks and the fingerprints: the profile's batches handed over.

With a fingerprint plan, the intake's checking thread reads the CSV as text in the block size
of the fingerprints' typed reader (`pipeline.store.dataset_batches`) and gives every batch it
has profiled to a `BatchRelay`; the fingerprint job converts each to the batch its typed
reader would have read from the same block (`CsvSource.convert`), so the file is tokenized
once and the fingerprints are the same, byte for byte. Where a value might convert otherwise
(pyarrow's casts are not the CSV reader's rules), or once the job has restarted, the job reads
the file with its own reader, as it did before.

The job tells the checks the types its reader gives the columns (`publish_types`), and the
checks read the numbers and booleans among them typed, as that reader does: the job then only
encodes the text columns. Where a value does not convert, the checks read the file again as
text and `give_up` the relay: the job reads the file itself. The checks read the columns the
PII scan reads as numbers (`pii_numbers.holds_contact_numbers`) as text all the same
(`checked_types`): a float64 holds 15 to 17 significant digits, so a 17-digit card number would
reach the scan with its last digit changed; the job converts those columns' text as it does
every column's when its types are not published.

The relay holds a few batches: the checks wait for a slower job, never the other way round
beyond that. The job leaves the relay when it stops (`detach`), so the checks never wait for
a job that is gone; the checks `abort` it when they stop early, so the job never waits for them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Mapping

import pyarrow as pa

from pipeline.checks.benchmark_fingerprints import BatchSource
from pipeline.checks.pii_numbers import holds_contact_numbers
from pipeline.intake.streamed_fingerprints import FingerprintCancelled
from pipeline.store.dataset_batches import CsvSource, RetypeColumns

# Both threads work in bursts (the checks' PII pre-filter every 4 MiB of a text column, the job's
# sort of each 256 Ki keys): with 16 batches (4 MiB of CSV) the checks often waited for the job
# and ended 2-4 s after an upload's last byte; with 64 (16 MiB) about 1 s earlier (bench/upload.py,
# docs/benchmarks.md), for about 10 MB more peak RSS.
RELAY_BATCHES = 64


class BatchRelay:
    """A bounded hand-over of record batches from one thread to another, used once."""

    def __init__(self, capacity: int = RELAY_BATCHES) -> None:
        self._capacity = capacity
        self._batches: deque[pa.RecordBatch] = deque()
        self._ready = threading.Condition()
        self._finished = False
        self._aborted = False
        self._detached = False
        self._given_up = False
        self._types: dict[str, pa.DataType] | None = None

    def publish_types(self, types: Mapping[str, pa.DataType]) -> None:
        """The consumer's reader's column types (before its first batch)."""
        with self._ready:
            self._types = dict(types)
            self._ready.notify_all()

    def types(self) -> dict[str, pa.DataType]:
        """Wait for the consumer's column types; none once it is gone."""
        with self._ready:
            while self._types is None and not self._detached:
                self._ready.wait()
            return {} if self._detached or self._types is None else dict(self._types)

    def give_up(self) -> None:
        """The producer stops relaying: the consumer reads the file itself (`RetypeColumns`)."""
        with self._ready:
            self._given_up = True
            self._batches.clear()
            self._ready.notify_all()

    def put(self, batch: pa.RecordBatch) -> None:
        with self._ready:
            while len(self._batches) >= self._capacity and self._open_for_puts():
                self._ready.wait()
            if self._open_for_puts():
                self._batches.append(batch)
                self._ready.notify_all()

    def _open_for_puts(self) -> bool:
        return not self._detached and not self._given_up

    def finish(self) -> None:
        """Every batch was put."""
        with self._ready:
            self._finished = True
            self._ready.notify_all()

    def abort(self) -> None:
        """The producer stopped early (no-op after `finish`): the consumer is cancelled."""
        with self._ready:
            if not self._finished:
                self._aborted = True
                self._ready.notify_all()

    def detach(self) -> None:
        """The consumer is gone: later batches are dropped."""
        with self._ready:
            self._detached = True
            self._batches.clear()
            self._ready.notify_all()

    def batches(self) -> Iterator[pa.RecordBatch]:
        while True:
            with self._ready:
                while not (self._batches or self._finished or self._aborted or self._given_up):
                    self._ready.wait()
                if self._given_up:
                    # The checks met a value their typed read refused and read the file as
                    # text: no batches will come, so the job reads the file itself.
                    raise RetypeColumns
                if self._aborted:
                    raise FingerprintCancelled("the checks stopped reading the file")
                if not self._batches:
                    return
                batch = self._batches.popleft()
                self._ready.notify_all()
            yield batch


def checked_types(types: Mapping[str, pa.DataType]) -> dict[str, pa.DataType]:
    """The job's types the checks may read typed: not those of columns the PII scan reads as
    numbers, whose digits must reach it as the file writes them (see the module docstring)."""
    return {name: kind for name, kind in types.items() if not holds_contact_numbers(name)}


def relayed_csv_batches(relay: BatchRelay, file_source: CsvSource) -> BatchSource:
    """`file_source`'s batches, converted from the relay's on the first start (see the module
    docstring); every later start reads the file with `file_source`."""
    started = False

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal started
        if started:
            yield from file_source()
            return
        started = True
        relay.publish_types(file_source.types)
        try:
            for text in relay.batches():
                typed = file_source.convert(text)
                if typed is None:
                    raise RetypeColumns  # start again on the file, whose reader decides
                yield typed
        finally:
            relay.detach()

    return batches
