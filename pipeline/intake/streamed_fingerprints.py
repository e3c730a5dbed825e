"""Fingerprinting a benchmark upload while it arrives: one worker thread beside the checks.

An accepted benchmark's rows are fingerprinted (`pipeline.checks.benchmark_fingerprints`). Done
after the last byte, that is a second read of the whole file on the critical path; instead, the
intake (`pipeline.intake.receiving`) starts a `FingerprintJob` as soon as it knows the file's
columns, given what the form declared before the file part (`FingerprintPlan`):

- CSV: once the header has arrived. The job converts the text batches the intake's checking
  thread profiles (`pipeline.intake.relayed_batches`: one parse of the file); where that might
  differ from its typed reader, it reads the growing temp file with that reader instead.
- Parquet: its footer comes last, so the job starts once the file is complete and the footer's
  claims are checked, and reads row group by row group beside the profile and the PII scan.

The job sees exactly the batches the sequential builder reads from the complete file, so it
writes the same fingerprint file, byte for byte. A refusal cancels it: an event checked between
batches, and a reader waiting for bytes wakes when the intake aborts; the intake joins the
thread before it removes the temp folder, where the job writes, so a refused upload leaves
nothing behind. A form whose declared columns change after the file part (fields sent after
it) is fingerprinted after the last byte instead (`pipeline.intake.uploads`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from pipeline.checks.benchmark_fingerprints import BatchSource, fingerprint_benchmark_batches
from pipeline.checks.fingerprint_files import FingerprintSummary

FINGERPRINTS_FILENAME = "benchmark.fingerprints"


@dataclass(frozen=True)
class FingerprintPlan:
    """What to fingerprint, known before the file's bytes: the declared columns and the task."""

    target_column: str
    input_columns: tuple[str, ...]
    eval_split: str
    task_type: str


class FingerprintCancelled(Exception):
    """The job was cancelled (the upload was refused or abandoned) before it finished."""


class FingerprintJob:
    """One upload's fingerprints, built in a worker thread into `out`.

    `source(wanted)` is a restartable stream of the file's `wanted` columns (`columns`: every
    column of the file); `on_exit` is called when the thread ends, however it ends.
    """

    def __init__(
        self,
        plan: FingerprintPlan,
        columns: Sequence[str],
        source: Callable[[Sequence[str]], BatchSource],
        out: Path,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        self.plan = plan
        self._on_exit = on_exit
        self.out = out
        self._columns = list(columns)
        self._source = source
        self._cancel = threading.Event()
        self._summary: FingerprintSummary | None = None
        self._error: BaseException | None = None
        # Rows the builder has taken from its source, across restarts: written by the job's
        # thread only, under the lock, so another thread reads a current count (`rows_taken`).
        self._rows_taken = 0
        self._count_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="upload-fingerprints", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        """Stop at the next batch; the caller still joins (`join`) before removing `out`."""
        self._cancel.set()

    @property
    def rows_taken(self) -> int:
        """How many rows of the file the job has read so far (counted again after a restart):
        above zero before the last byte shows the job works while the upload arrives."""
        with self._count_lock:
            return self._rows_taken

    def join(self) -> None:
        if self._thread.ident is not None:
            self._thread.join()

    def result(self) -> FingerprintSummary:
        """Wait for the job: its summary, or the exception that ended it."""
        self.join()
        if self._cancel.is_set() or (self._summary is None and self._error is None):
            raise FingerprintCancelled("the fingerprint job was cancelled")
        if self._error is not None:
            raise self._error
        assert self._summary is not None
        return self._summary

    def _run(self) -> None:
        plan = self.plan
        try:
            self._summary = fingerprint_benchmark_batches(
                lambda wanted: self._cancellable(self._source(wanted)),
                columns=self._columns,
                target_column=plan.target_column,
                input_columns=plan.input_columns,
                task_type=plan.task_type,
                eval_split=plan.eval_split,
                out=self.out,
                tmp_root=self.out.parent,
            )
        except BaseException as exc:  # reported by result(); after a cancel, nobody asks
            if not self._cancel.is_set():
                self._error = exc
        finally:
            if self._on_exit is not None:
                self._on_exit()

    def _cancellable(self, source: BatchSource) -> BatchSource:
        def batches() -> Iterator[pa.RecordBatch]:
            for batch in source():
                if self._cancel.is_set():
                    raise FingerprintCancelled
                with self._count_lock:
                    self._rows_taken += batch.num_rows
                yield batch

        return batches
