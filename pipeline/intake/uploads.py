"""Benchmark dataset uploads (spec §4.3, §7, §8): form settings, content rules, PII, storage.

The upload itself is received and profiled by `pipeline.intake.receiving`. An accepted file's rows
are fingerprinted (`pipeline.checks.integrity`: contributions copying them are refused later), then
it becomes the model's next dataset version: the fingerprints go to
`integrity/{model_id}/{version}/` and the object `datasets/{model_id}/{version}/{filename}` is
written completely, then one transaction writes its DatasetVersion (kind "benchmark") and
BenchmarkSpec rows, plus the arrival event on the local backend (on S3 the bucket
notification announces the object). Any failure after the writes deletes both objects again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.checks.benchmark_fingerprints import benchmark_fingerprint_key
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.core.tables import BenchmarkSpec, DatasetVersion
from pipeline.intake.receiving import (
    DatasetIntake,
    DatasetProfile,
    ReceivedDataset,
    stored_filename,
)
from pipeline.models.registry import allocate_version, get_model
from pipeline.store.objectstore import ObjectStore, StoredObject, dataset_key
from pipeline.store.queue import enqueue_local_arrival

if TYPE_CHECKING:
    from pipeline.checks.fingerprint_files import FingerprintSummary
    from pipeline.checks.pii import PiiReport

log = logging.getLogger(__name__)

MIN_ROWS = 50

FORM_FIELDS = (
    "eval_split",
    "metric_name",
    "metric_direction",
    "target_column",
    "input_columns",
    "allow_pii",
)
FIELD_MAX_CHARS = {"eval_split": 100, "metric_name": 50, "metric_direction": 20}
COLUMN_NAME_MAX_CHARS = 200
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


# Form settings (spec §4.3).


@dataclass(frozen=True)
class BenchmarkForm:
    """The upload's form settings with the spec's defaults."""

    eval_split: str = "test"
    metric_name: str = "accuracy"
    metric_direction: str = "higher_is_better"
    target_column: str = "target"
    input_columns: tuple[str, ...] = ()
    allow_pii: bool = False

    @property
    def declared_columns(self) -> list[str]:
        return [self.target_column, *self.input_columns]


def parse_bool(value: str, name: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidInput(f"{name} must be true or false")


def split_columns(value: str) -> tuple[str, ...]:
    """`input_columns`: comma-separated names, blanks dropped, first occurrence kept."""
    names = [part.strip() for part in value.split(",")]
    return tuple(dict.fromkeys(name for name in names if name))


def parse_form(fields: Mapping[str, str], task_type: str | None = None) -> BenchmarkForm:
    """Form values to settings; a blank value means the default. InvalidInput (400) when bad."""
    from pipeline.evaluation.metrics import validate_metric

    unknown = sorted(set(fields) - set(FORM_FIELDS))
    if unknown:
        raise InvalidInput(f"unexpected form field(s): {', '.join(map(repr, unknown))}")
    defaults = BenchmarkForm()
    values: dict[str, Any] = {}
    for name in ("eval_split", "metric_name", "metric_direction", "target_column"):
        text = fields.get(name, "").strip()
        limit = FIELD_MAX_CHARS.get(name, COLUMN_NAME_MAX_CHARS)
        if len(text) > limit:
            raise InvalidInput(f"{name} is longer than {limit} characters")
        values[name] = text or getattr(defaults, name)
    inputs = split_columns(fields.get("input_columns", ""))
    too_long = [name for name in inputs if len(name) > COLUMN_NAME_MAX_CHARS]
    if too_long:
        raise InvalidInput(f"input_columns: a name is longer than {COLUMN_NAME_MAX_CHARS} chars")
    if values["target_column"] in inputs:
        raise InvalidInput(
            f"input_columns must not include the target column {values['target_column']!r}"
        )
    form = BenchmarkForm(
        **values,
        input_columns=inputs,
        allow_pii=parse_bool(fields.get("allow_pii", ""), "allow_pii"),
    )
    validate_metric(form.metric_name, form.metric_direction, task_type)
    return form


# Rules (spec §7, §8).


def check_profile(profile: DatasetProfile, form: BenchmarkForm) -> None:
    """Unprocessable (422) naming every rule the file fails, PII aside."""
    problems = []
    if profile.row_count < MIN_ROWS:
        problems.append(f"the file has {profile.row_count} rows; at least {MIN_ROWS} are needed")
    present = set(profile.columns)
    missing = [name for name in form.declared_columns if name not in present]
    if missing:
        problems.append(f"column(s) missing from the file: {', '.join(map(repr, missing))}")
    empty = [
        name for name in form.declared_columns if name in present and name not in profile.filled
    ]
    if empty:
        problems.append(f"column(s) entirely empty: {', '.join(map(repr, empty))}")
    if problems:
        raise Unprocessable("; ".join(problems))


def scan_for_pii(profile: DatasetProfile, settings: Settings) -> PiiReport:
    """The shared Presidio scanner over the profile's bounded sample of text values."""
    import pandas as pd

    from pipeline.checks.pii import scan_frame

    frame = pd.DataFrame(
        {name: pd.Series(values, dtype=object) for name, values in profile.text_samples.items()}
    )
    return scan_frame(frame, settings)


def check_pii(profile: DatasetProfile, settings: Settings) -> PiiReport:
    """Unprocessable (422) naming columns and entity types (never values) when PII is found."""
    report = scan_for_pii(profile, settings)
    log.info("PII scan: %s in %.2f s", report.summary(), report.seconds)
    if report.found:
        raise Unprocessable(f"{report.summary()} (allow_pii is false)")
    return report


# Acceptance: store the object, then one transaction.


@dataclass(frozen=True)
class UploadTarget:
    model_id: int
    task_type: str


@dataclass(frozen=True)
class BenchmarkUpload:
    """An accepted upload: the spec §2.6 result plus what was recorded."""

    uri: str
    sha256: str
    spec_id: str
    filename: str
    size_bytes: int
    version: str
    row_count: int

    def response(self) -> dict[str, Any]:
        return {
            "s3_uri": self.uri,
            "sha256_hash": self.sha256,
            "spec_id": self.spec_id,
            "filename": self.filename,
            "file_size_bytes": self.size_bytes,
        }


def load_upload_target(db: Database, model_id: int) -> UploadTarget:
    # get_model answers NotFound for ids outside the id column's range, too.
    with db.session() as session:
        model = get_model(session, model_id)
        return UploadTarget(model.id, model.task_type)


def record_benchmark(
    session: Any,
    *,
    target: UploadTarget,
    number: int,
    version: str,
    stored: StoredObject,
    received: ReceivedDataset,
    filename: str,
    form: BenchmarkForm,
    created_by: str | None,
) -> BenchmarkSpec:
    """The DatasetVersion and BenchmarkSpec rows of an accepted upload, in the caller's session."""
    profile = received.profile
    dataset = DatasetVersion(
        model_id=target.model_id,
        version=version,
        version_number=number,
        kind="benchmark",
        object_key=stored.key,
        uri=stored.uri,
        file_format=received.file_format,
        sha256=stored.sha256,
        size_bytes=stored.size_bytes,
        row_count=profile.row_count,
        columns=list(profile.columns),
    )
    session.add(dataset)
    session.flush()
    spec = BenchmarkSpec(
        model_id=target.model_id,
        dataset_version_id=dataset.id,
        filename=filename,
        eval_split=form.eval_split,
        metric_name=form.metric_name,
        metric_direction=form.metric_direction,
        target_column=form.target_column,
        input_columns=list(form.input_columns),
        row_count=profile.row_count,
        columns=list(profile.columns),
        allow_pii=form.allow_pii,
        created_by=created_by,
    )
    session.add(spec)
    session.flush()
    return spec


def store_received(store: ObjectStore, key: str, received: ReceivedDataset) -> StoredObject:
    """Write the received file under `key`, complete before it becomes visible.

    The SHA-256 was computed while the bytes arrived, so the store need not hash 500 MB again;
    the local store takes the temp file by an atomic rename (same data dir) instead of a copy.
    """
    return store.put_file(key, received.path, sha256=received.sha256, move=True)


def fingerprint_received(
    received: ReceivedDataset, form: BenchmarkForm, task_type: str
) -> tuple[Path, FingerprintSummary]:
    """Fingerprint the received rows into a file beside the upload (removed with it)."""
    from pipeline.checks.benchmark_fingerprints import fingerprint_benchmark_file

    folder = received.path.parent
    out = folder / "benchmark.fingerprints"
    summary = fingerprint_benchmark_file(
        received.path,
        received.file_format,
        columns=received.profile.columns,
        target_column=form.target_column,
        input_columns=form.input_columns,
        task_type=task_type,
        out=out,
        tmp_root=folder,
    )
    return out, summary


def accept_benchmark_upload(
    db: Database,
    store: ObjectStore,
    settings: Settings,
    *,
    target: UploadTarget,
    intake: DatasetIntake,
    fields: Mapping[str, str],
    created_by: str | None,
    local_queue: bool,
) -> BenchmarkUpload:
    """Check a received upload and store it as the model's next version (see module doc).

    400: bad form values, not CSV/Parquet; 422: a content rule or PII; nothing is stored
    then. A failure after the object is written deletes it, so no object outlives a rollback.
    """
    started = time.perf_counter()
    form = parse_form(fields, target.task_type)
    received = intake.finish()
    checked = time.perf_counter()
    check_profile(received.profile, form)
    if not form.allow_pii:
        check_pii(received.profile, settings)
    scanned = time.perf_counter()
    fingerprints: Path | None = None
    fingerprinted_rows = 0
    try:
        fingerprints, summary = fingerprint_received(received, form, target.task_type)
        fingerprinted_rows = summary.rows
    except Exception:
        # Not a reason to refuse a valid benchmark: the pipeline fingerprints it when missing.
        log.exception("fingerprinting the benchmark upload failed; the pipeline will retry")
    fingerprinted = time.perf_counter()
    name = stored_filename(intake.filename, received.file_format)

    number, version = allocate_version(db, target.model_id)
    key = dataset_key(target.model_id, version, name)
    fingerprint_key = benchmark_fingerprint_key(target.model_id, version)
    try:
        # Fingerprints first: an arrival announced by the dataset object finds them.
        if fingerprints is not None:
            store.put_file(fingerprint_key, fingerprints)
        stored = store_received(store, key, received)
        written = time.perf_counter()
        with db.session() as session:
            spec = record_benchmark(
                session,
                target=target,
                number=number,
                version=version,
                stored=stored,
                received=received,
                filename=name,
                form=form,
                created_by=created_by,
            )
            if local_queue:
                enqueue_local_arrival(session, stored)
    except BaseException:
        for written_key in (key, fingerprint_key):
            try:
                store.delete(written_key)
            except Exception:  # the original failure matters more; the key is logged
                log.exception("could not delete %s after a failed upload", written_key)
        raise
    log.info(
        "benchmark upload stored: model %s %s %s (%d rows, %d bytes, %d fingerprinted); "
        "seconds after the last byte: checks %.2f, PII %.2f, fingerprints %.2f, "
        "object write %.2f, commit %.2f",
        target.model_id,
        version,
        name,
        received.profile.row_count,
        stored.size_bytes,
        fingerprinted_rows,
        checked - started,
        scanned - checked,
        fingerprinted - scanned,
        written - fingerprinted,
        time.perf_counter() - written,
    )
    return BenchmarkUpload(
        uri=stored.uri,
        sha256=stored.sha256,
        spec_id=spec.id,
        filename=name,
        size_bytes=stored.size_bytes,
        version=version,
        row_count=received.profile.row_count,
    )
