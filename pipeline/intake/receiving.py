"""Receiving a dataset upload into a temporary file and profiling it while it arrives.

An upload is received into a temporary file (`DatasetIntake`); its format is sniffed from the
first bytes and it is profiled by `pipeline.intake.profiles`. A CSV file is checked by a
background thread that reads the bytes already written while the rest is still arriving, so the
checks (the PII pre-filter of every text value among them) end soon after the last byte; a Parquet
file is profiled once complete. A benchmark upload given a `FingerprintPlan` before its bytes is
also fingerprinted by a second thread while it arrives (`pipeline.intake.streamed_fingerprints`).
The client's file name must not claim another format, and is made safe for the store
(`stored_filename`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.checks.benchmark_fingerprints import BatchSource
from pipeline.core.config import Settings
from pipeline.core.errors import DomainError, InvalidInput, PayloadTooLarge
from pipeline.core.process_memory import release_free_memory
from pipeline.core.tempfiles import locked_temp_dir
from pipeline.core.writeback import start_writeback
from pipeline.intake.profiles import (
    CsvHead,
    DatasetProfile,
    profile_csv,
    profile_parquet,
    read_csv_head,
)
from pipeline.intake.relayed_batches import BatchRelay, checked_types, relayed_csv_batches
from pipeline.intake.sniffing import HEAD_BYTES, MAX_HEAD_BYTES, sniff_format
from pipeline.intake.streamed_fingerprints import (
    FINGERPRINTS_FILENAME,
    FingerprintJob,
    FingerprintPlan,
)
from pipeline.store import dataset_batches
from pipeline.store.csv_text import CsvTextCheck, MalformedCsv
from pipeline.store.dataset_batches import RetypeColumns, csv_batches, file_batches
from pipeline.store.formats import (
    CSV,
    EXTENSIONS,
    PARQUET,
    PARQUET_MAGIC,
    UPLOAD_FORMATS,
    FileFormat,
    extension,
    format_of,
    format_title,
)

FILENAME_MAX_CHARS = 200
# The received bytes' disk write is started every this many bytes (`pipeline.core.writeback`).
WRITEBACK_BYTES = 16 * 1024 * 1024
# Buffers one writev call takes at most (Linux's IOV_MAX).
IOV_MAX = 1024


# File names.


def check_extension(filename: str | None, file_format: FileFormat) -> None:
    """A name ending in .csv or .parquet must match the content (InvalidInput otherwise)."""
    claimed = format_of(filename or "")
    if claimed in UPLOAD_FORMATS and claimed != file_format:
        suffix = extension(filename or "")
        raise InvalidInput(
            f"the file is named {suffix} but its content is {format_title(file_format)}"
        )


def stored_filename(filename: str | None, file_format: FileFormat) -> str:
    """A safe object name: base name only, [A-Za-z0-9._-], extension matching the format."""
    name = (filename or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = unicodedata.normalize("NFKC", name)
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    stem, suffix = os.path.splitext(name)
    if EXTENSIONS.get(suffix.lower()) != file_format:
        stem, suffix = name, f".{file_format}"
    stem = stem.strip("._-")[:FILENAME_MAX_CHARS] or "dataset"
    return stem + suffix


# Receiving a file while checking it.


class _Aborted(Exception):
    """The upload was abandoned while the checking thread waited for bytes."""


class _Progress:
    """How many bytes of the temp file are written, shared by the writer and the checker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.written = 0
        self.done = False
        self.aborted = False

    def advance(self, count: int) -> None:
        with self._cond:
            self.written += count
            self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            self.done = True
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self.aborted = True
            self._cond.notify_all()

    def wait_for(self, position: int, count: int) -> int:
        """Block until `count` bytes past `position` are written or the file is complete."""
        with self._cond:
            while self.written < position + count and not self.done and not self.aborted:
                self._cond.wait()
            if self.aborted:
                raise _Aborted
            return self.written


class _GrowingFileReader:
    """A read-only file object over a file another thread is still appending to.

    `read(n)` returns exactly n bytes unless the file is complete (pyarrow takes a short read
    for the end of the stream).
    """

    def __init__(self, path: Path, progress: _Progress) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self._progress = progress
        self._position = 0
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = 1 << 62
        written = self._progress.wait_for(self._position, size)
        count = min(size, written - self._position)
        if count <= 0:
            return b""
        data = os.pread(self._fd, count, self._position)
        self._position += len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._fd)

    def __enter__(self) -> _GrowingFileReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@dataclass
class ReceivedDataset:
    path: Path
    size_bytes: int
    file_format: FileFormat
    sha256: str
    profile: DatasetProfile


class DatasetIntake:
    """One upload's temp file: `write` chunks in order (from one thread), then `finish`.

    CSV is checked by a background thread while the bytes arrive, and its bytes as they are
    written (`pipeline.store.csv_text`: control bytes, quotes); once a check fails, later
    bytes are counted (for the size limit) but no longer kept. With `plan_fingerprints`, the
    file is fingerprinted by a second thread (`fingerprint_job`). `close` always removes the
    temp folder and stops the threads; use the intake as a context manager. `filename` (the
    client's name, if any) must match the content when it ends in .csv or .parquet.
    """

    def __init__(self, tmp_root: Path, *, max_bytes: int, pii: Settings | None) -> None:
        self.max_bytes = max_bytes
        self.pii = pii  # the PII scan's settings; None: no scan
        self.filename: str | None = None
        self.size_bytes = 0
        self.file_format: FileFormat | None = None
        self._head = bytearray()
        self._failure: BaseException | None = None
        self._profile: DatasetProfile | None = None
        self._thread: threading.Thread | None = None
        self._plan: FingerprintPlan | None = None
        self.fingerprint_job: FingerprintJob | None = None
        self._relay: BatchRelay | None = None
        self._text_check: CsvTextCheck | None = None  # a CSV's bytes, checked as written
        self._progress = _Progress()
        self._hash = hashlib.sha256()
        self._written_back = 0  # bytes whose disk write was started (`start_writeback`)
        # Locked while this intake lives, so a restart removes it only if its process died.
        self.dir, lock = locked_temp_dir(tmp_root, UPLOAD_DIR_PREFIX)
        self._dir_lock: int | None = lock
        self.path = self.dir / "upload.part"
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)

    def __enter__(self) -> DatasetIntake:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def write(self, data: bytes) -> None:
        self.size_bytes += len(data)
        if self.size_bytes > self.max_bytes:
            raise PayloadTooLarge(f"the file exceeds {self.max_bytes} bytes")
        if self._failure is not None:
            return
        if self.file_format is None:
            self._head += data
            if not self._head_complete():
                return
            data = bytes(self._head)
            self._head = bytearray()
            self._start(data, at_eof=False)
            if self._failure is not None:
                return
        self._append([data])

    def write_chunks(self, chunks: Sequence[bytes]) -> None:
        """`write` each chunk in turn; once the checks run, all of them with one system call."""
        if self.file_format is None or self._failure is not None:
            for data in chunks:
                self.write(data)
            return
        self.size_bytes += sum(map(len, chunks))
        if self.size_bytes > self.max_bytes:
            raise PayloadTooLarge(f"the file exceeds {self.max_bytes} bytes")
        self._append(chunks)

    def plan_fingerprints(self, plan: FingerprintPlan) -> None:
        """Fingerprint the file while it arrives (given before its first byte)."""
        self._plan = plan

    def finish(self) -> ReceivedDataset:
        """Wait for the checks; the received file and its profile, or the first failure."""
        if self.file_format is None and self._failure is None:
            data = bytes(self._head)
            self._head = bytearray()
            self._start(data, at_eof=True)
            if self._failure is None:
                self._append([data])
        if self._text_check is not None and self._failure is None:
            try:
                self._text_check.finish()
            except MalformedCsv as exc:
                self._fail(InvalidInput(str(exc)))
        self._close_writer()
        self._progress.finish()
        if self._thread is not None:
            self._thread.join()
        if self._failure is not None:
            raise self._failure
        assert self.file_format is not None
        if self.file_format == PARQUET:
            self._profile = profile_parquet(
                self.path, self.pii, on_checked=self._fingerprint_parquet
            )
        assert self._profile is not None
        return ReceivedDataset(
            self.path, self.size_bytes, self.file_format, self._hash.hexdigest(), self._profile
        )

    def close(self) -> None:
        """Stop the threads and remove the temp folder; safe to call twice."""
        if self.fingerprint_job is not None:
            self.fingerprint_job.cancel()
        self._progress.abort()
        if self._thread is not None:
            self._thread.join()
        if self.fingerprint_job is not None:
            self.fingerprint_job.join()
        self._close_writer()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self._dir_lock is not None:
            os.close(self._dir_lock)
            self._dir_lock = None
            release_free_memory()  # what the upload's buffers freed, back to the system

    def _head_complete(self) -> bool:
        if len(self._head) >= MAX_HEAD_BYTES:
            return True
        if len(self._head) < HEAD_BYTES:
            return False
        head = self._head
        return head.startswith(PARQUET_MAGIC) or b"\n" in head or b"\r" in head  # a line end

    def _start(self, head: bytes, *, at_eof: bool) -> None:
        try:
            file_format = sniff_format(head, at_eof=at_eof)
            check_extension(self.filename, file_format)
            csv_head = read_csv_head(head, at_eof=at_eof) if file_format == CSV else None
        except DomainError as exc:
            self._failure = exc
            return
        self.file_format = file_format
        if csv_head is not None:
            self._text_check = CsvTextCheck()
            if csv_head.header_bytes > dataset_batches.CSV_BLOCK_BYTES:
                # The fingerprints' reader takes no line longer than its block: no streamed
                # fingerprints; the checks read 1 MiB blocks (a header may be 1 MiB).
                self._plan = None
            if self._plan is not None:
                self._relay = BatchRelay()
            self._start_fingerprints(csv_head.columns, self._csv_fingerprint_source)
            self._thread = threading.Thread(
                target=self._check_csv, args=(csv_head,), name="upload-csv-check", daemon=True
            )
            self._thread.start()

    def _csv_fingerprint_source(self, wanted: Sequence[str]) -> BatchSource:
        file_source = csv_batches(self._growing_reader, wanted)
        if self._relay is None:
            return file_source
        return relayed_csv_batches(self._relay, file_source)

    def _growing_reader(self) -> _GrowingFileReader:
        return _GrowingFileReader(self.path, self._progress)

    def _fingerprint_parquet(self, columns: list[str]) -> None:
        self._start_fingerprints(columns, lambda wanted: file_batches(self.path, PARQUET, wanted))

    def _start_fingerprints(
        self, columns: list[str], source: Callable[[Sequence[str]], BatchSource]
    ) -> None:
        if self._plan is None:
            return
        out = self.dir / FINGERPRINTS_FILENAME
        on_exit = self._relay.detach if self._relay is not None else None
        self.fingerprint_job = FingerprintJob(self._plan, columns, source, out, on_exit)
        self.fingerprint_job.start()

    def _check_csv(self, head: CsvHead) -> None:
        relay = self._relay
        try:
            if relay is None:
                self._profile = profile_csv(self._growing_reader, head, self.pii)
            else:  # one parse: in the fingerprints' blocks and types, handed to them
                try:
                    self._profile = profile_csv(
                        self._growing_reader,
                        head,
                        self.pii,
                        block_bytes=dataset_batches.CSV_BLOCK_BYTES,
                        on_batch=relay.put,
                        typed=checked_types(relay.types()),
                    )
                    relay.finish()
                except RetypeColumns:  # the CSV's types change below its first block:
                    # a text read scans the columns that turn, and the job reads the file itself
                    relay.give_up()
                    self._profile = profile_csv(self._growing_reader, head, self.pii, text=True)
        except _Aborted:
            pass
        except BaseException as exc:
            if not self._progress.aborted and self._failure is None:
                self._failure = exc
                if self.fingerprint_job is not None:
                    self.fingerprint_job.cancel()  # the upload is refused: spare the CPU
        finally:
            if relay is not None:
                relay.abort()  # wakes a job waiting for batches that will not come

    def _fail(self, exc: DomainError) -> None:
        """Refuse the upload from the writing side: the checking thread and the fingerprint
        job stop, later bytes are no longer kept."""
        self._failure = exc
        self._progress.abort()
        if self.fingerprint_job is not None:
            self.fingerprint_job.cancel()

    def _append(self, chunks: Sequence[bytes]) -> None:
        if self._text_check is not None:
            # Checked before they are written: the checking thread never reads bytes refused.
            try:
                for data in chunks:
                    self._text_check.feed(data)
            except MalformedCsv as exc:
                self._fail(InvalidInput(str(exc)))
                return
        assert self._fd is not None
        for data in chunks:
            self._hash.update(data)
        views = [memoryview(data) for data in chunks if data]
        while views:
            written = os.writev(self._fd, views[:IOV_MAX])
            while views and written >= len(views[0]):
                written -= len(views.pop(0))
            if written:
                views[0] = views[0][written:]
        self._progress.advance(sum(map(len, chunks)))
        end = self._progress.written
        if end - self._written_back >= WRITEBACK_BYTES:  # the store's fsync then waits less
            start_writeback(self._fd, self._written_back, end - self._written_back)
            self._written_back = end

    def _close_writer(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


UPLOAD_DIR_PREFIX = "upload-"


def upload_tmp_root(settings: Settings) -> Path:
    """Where uploads are received: inside the data dir, not a possibly RAM-backed /tmp."""
    return settings.data_dir / "tmp" / "uploads"
