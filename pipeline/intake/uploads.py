"""Benchmark dataset uploads (spec §4.3, §7, §8): form settings, content rules, PII, storage.

The upload itself is received and profiled by `pipeline.intake.receiving`. An accepted file's rows
are fingerprinted (`pipeline.checks.integrity`: contributions copying them are refused later),
while it arrives when the form's fields came first (`pipeline.intake.streamed_fingerprints`), then
it becomes the model's next dataset version (`pipeline.intake.versions`): the fingerprints go to
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
from typing import Any

from pipeline.checks.benchmark_fingerprints import (
    benchmark_fingerprint_key,
    fingerprint_benchmark_file,
)
from pipeline.checks.fingerprint_files import FingerprintSummary
from pipeline.checks.pii_scan import PiiReport
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import DomainError, InvalidInput, Unprocessable
from pipeline.core.tables import BENCHMARK_VERSION, BenchmarkSpec, DatasetVersion
from pipeline.core.text import has_control_characters
from pipeline.evaluation.metrics import validate_metric
from pipeline.intake.profiles import DatasetProfile
from pipeline.intake.receiving import DatasetIntake, ReceivedDataset, stored_filename
from pipeline.intake.streamed_fingerprints import FINGERPRINTS_FILENAME, FingerprintPlan
from pipeline.intake.versions import VersionDraft, VersionRecord, new_dataset_version
from pipeline.models.registry import get_model
from pipeline.store.objectstore import ObjectStore, StoredObject, public_uri

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
INPUT_COLUMNS_MAX_CHARS = 16_384
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
    raw_inputs = fields.get("input_columns", "")
    if len(raw_inputs) > INPUT_COLUMNS_MAX_CHARS:
        raise InvalidInput(f"input_columns is longer than {INPUT_COLUMNS_MAX_CHARS} characters")
    for name in FORM_FIELDS:
        # NUL breaks PostgreSQL text; the others break logs and column matching.
        if has_control_characters(fields.get(name, "")):
            raise InvalidInput(f"{name} must not contain control characters")
    inputs = split_columns(raw_inputs)
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


def check_pii(profile: DatasetProfile) -> PiiReport:
    """Unprocessable (422) naming columns and entity types (never values) when PII is found.

    Every text value met the pre-filter while the file was read; Presidio confirms the
    candidates now (`pipeline.checks.pii_scan`).
    """
    report = profile.pii_report()
    log.info(
        "PII scan: %s (%d candidates of %d values) in %.2f s",
        report.summary(),
        report.candidate_values,
        report.scanned_values,
        report.seconds,
    )
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
    dataset: DatasetVersion,
    received: ReceivedDataset,
    filename: str,
    form: BenchmarkForm,
    created_by: str | None,
) -> BenchmarkSpec:
    """The BenchmarkSpec row of an accepted upload's version, in the caller's session."""
    profile = received.profile
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


def store_received(draft: VersionDraft, key: str, received: ReceivedDataset) -> StoredObject:
    """Write the received file under `key`, complete before it becomes visible.

    The SHA-256 was computed while the bytes arrived, so the store need not hash 500 MB again;
    the local store takes the temp file by an atomic rename (same data dir) instead of a copy.
    """
    return draft.put_file(key, received.path, sha256=received.sha256, move=True)


def fingerprint_plan(form: BenchmarkForm, task_type: str) -> FingerprintPlan:
    return FingerprintPlan(form.target_column, form.input_columns, form.eval_split, task_type)


def early_fingerprint_plan(fields: Mapping[str, str], task_type: str) -> FingerprintPlan | None:
    """The plan of the form fields sent before the file part, when they are valid: the
    intake fingerprints the file while it arrives. None: fingerprint after the last byte."""
    try:
        return fingerprint_plan(parse_form(fields, task_type), task_type)
    except DomainError:
        return None  # the same fields are refused, with their reason, once the body is read


def fingerprint_received(
    intake: DatasetIntake, received: ReceivedDataset, form: BenchmarkForm, task_type: str
) -> tuple[Path, FingerprintSummary]:
    """The received rows' fingerprints in a file beside the upload (removed with it): the
    intake's job's when it fingerprinted the file while it arrived with this form's columns,
    else built now."""
    plan = fingerprint_plan(form, task_type)
    job = intake.fingerprint_job
    if job is not None and job.plan == plan:
        return job.out, job.result()
    if job is not None:  # fields sent after the file changed the declared columns
        job.cancel()
        job.join()
    folder = received.path.parent
    out = folder / FINGERPRINTS_FILENAME
    summary = fingerprint_benchmark_file(
        received.path,
        received.file_format,
        columns=received.profile.columns,
        target_column=form.target_column,
        input_columns=form.input_columns,
        task_type=task_type,
        eval_split=form.eval_split,
        out=out,
        tmp_root=folder,
    )
    return out, summary


class _Stopwatch:
    """Seconds spent in each step of one upload after its last byte, for the log line."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.laps: list[str] = []

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.laps.append(f"{step} {now - self._last:.2f}")
        self._last = now


@dataclass(frozen=True)
class _CheckedUpload:
    form: BenchmarkForm
    received: ReceivedDataset
    fingerprints: Path | None
    fingerprinted_rows: int

    def version_record(self) -> VersionRecord:
        profile = self.received.profile
        return VersionRecord(
            BENCHMARK_VERSION, self.received.file_format, profile.row_count, list(profile.columns)
        )


def _check_upload(
    settings: Settings,
    target: UploadTarget,
    intake: DatasetIntake,
    fields: Mapping[str, str],
    watch: _Stopwatch,
) -> _CheckedUpload:
    """Form, content rules, PII, then fingerprints; raises before anything is stored."""
    form = parse_form(fields, target.task_type)
    received = intake.finish()
    watch.lap("checks")
    check_profile(received.profile, form)
    if not form.allow_pii:
        check_pii(received.profile)
    watch.lap("PII")
    fingerprints: Path | None = None
    fingerprinted_rows = 0
    try:
        fingerprints, summary = fingerprint_received(intake, received, form, target.task_type)
        fingerprinted_rows = summary.rows
    except Exception:
        # Not a reason to refuse a valid benchmark: the pipeline fingerprints it when missing.
        log.exception("fingerprinting the benchmark upload failed; the pipeline will retry")
    watch.lap("fingerprints")
    return _CheckedUpload(form, received, fingerprints, fingerprinted_rows)


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
    watch = _Stopwatch()
    checked = _check_upload(settings, target, intake, fields, watch)
    received = checked.received
    name = stored_filename(intake.filename, received.file_format)
    record = checked.version_record()
    with new_dataset_version(db, store, target.model_id) as draft:
        # Fingerprints first: an arrival announced by the dataset object finds them.
        if checked.fingerprints is not None:
            key = benchmark_fingerprint_key(target.model_id, draft.version)
            draft.put_file(key, checked.fingerprints)
        stored = store_received(draft, draft.key(name), received)
        watch.lap("object write")
        with draft.recording(stored, record, local_queue=local_queue) as (session, dataset):
            spec = record_benchmark(
                session,
                target=target,
                dataset=dataset,
                received=received,
                filename=name,
                form=checked.form,
                created_by=created_by,
            )
    watch.lap("commit")
    log.info(
        "benchmark upload stored: model %s %s %s (%d rows, %d bytes, %d fingerprinted); "
        "seconds after the last byte: %s",
        target.model_id,
        draft.version,
        name,
        received.profile.row_count,
        stored.size_bytes,
        checked.fingerprinted_rows,
        ", ".join(watch.laps),
    )
    return BenchmarkUpload(
        uri=public_uri(stored.uri, stored.key),
        sha256=stored.sha256,
        spec_id=spec.id,
        filename=name,
        size_bytes=stored.size_bytes,
        version=draft.version,
        row_count=received.profile.row_count,
    )
