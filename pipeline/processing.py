"""Processing of dataset versions: claim, read, check, evaluate and pay (the assets call these).

A run for the partition `{model_id}__{version}` works on a *batch*: every dataset version of
the model up to and including `version` that is not yet processed, in version order, so that
arrivals debounced into one run are all handled. What is pending:

- a contribution version whose job is `queued` (claimed by an atomic `queued → validating`
  update, so two runs never process the same job);
- a benchmark version for which no evaluation is recorded yet (a new benchmark re-scores the
  model on it);
- an `external` version (an object that arrived in the store without going through the API)
  is given a contribution job owned by `external` and then handled as a contribution.

Contribution status: `queued → validating` (readable file, spec §8 quality thresholds with
data-spec compliance, PII scan) `→ evaluating` (trained and scored with and without its rows)
`→ rewarded` (improvement > 0; ledger written) or `rejected` (a check failed, or no
improvement) or `failed` (an unexpected error); `reason` says why. A contribution of a model
without any BenchmarkSpec goes back to `queued` with a reason and is evaluated by the first run
after a benchmark arrives.

Accepted training rows are the rows of contributions that improved the model: status
`rewarded`, or `evaluating` with a positive improvement (evaluated earlier in the same run,
rewards pending). Rows rejected for no improvement are not training data.

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, exists, or_, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.config import Settings
from pipeline.db import Database
from pipeline.errors import DomainError, InvalidInput
from pipeline.objectstore import ObjectStore, dataset_key, object_store_from_settings
from pipeline.tables import (
    BenchmarkSpec,
    Contribution,
    ContributorProfile,
    DatasetVersion,
    Evaluation,
    Model,
    RewardEntry,
    utcnow,
)

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.quality import QualityReport

log = logging.getLogger(__name__)

QUEUED = "queued"
VALIDATING = "validating"
EVALUATING = "evaluating"
REWARDED = "rewarded"
REJECTED = "rejected"
FAILED = "failed"
STATUSES = (QUEUED, VALIDATING, EVALUATING, REWARDED, REJECTED, FAILED)

TRIGGERS = ("arrival", "schedule", "manual")
EXTERNAL_SUBMITTER = "external"
MANIFEST_FILENAME = "manifest.json"
MANIFEST_MAX_BYTES = 1024 * 1024
# Key of the marker `_read_manifest_object` returns for a manifest.json that cannot be used.
INVALID_MARK = "_invalid"


# --- services ------------------------------------------------------------------------------


class Services:
    """Settings, database and object store of one process (what the Dagster resource holds)."""

    def __init__(
        self, settings: Settings, db: Database | None = None, store: ObjectStore | None = None
    ) -> None:
        self.settings = settings
        self._owns_db = db is None
        self.db = db or Database.from_settings(settings)
        self.store: ObjectStore = store or object_store_from_settings(settings)
        logging.getLogger("pipeline").setLevel(settings.pipeline_log_level)

    def close(self) -> None:
        if self._owns_db:
            self.db.dispose()


# --- batches -------------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionItem:
    """One dataset version in a batch."""

    dataset_version_id: int
    model_id: int
    version: str
    version_number: int
    kind: str  # contribution | benchmark | external
    object_key: str
    file_format: str
    contribution_id: str | None = None
    benchmark_spec_id: str | None = None

    @property
    def partition_key(self) -> str:
        return f"{self.model_id}__{self.version}"

    @property
    def is_contribution(self) -> bool:
        return self.contribution_id is not None


@dataclass(frozen=True)
class Batch:
    """What one run processes: pending versions in version order, and whether to re-score."""

    model_id: int
    version: str
    trigger: str
    items: tuple[VersionItem, ...] = ()
    rescore: bool = False
    run_id: str | None = None

    @property
    def partition_key(self) -> str:
        return f"{self.model_id}__{self.version}"

    @property
    def versions(self) -> list[str]:
        return [item.version for item in self.items]

    def contributions(self) -> list[VersionItem]:
        return [item for item in self.items if item.is_contribution]

    def other_partition_keys(self) -> list[str]:
        """Partitions this run also processed (debounced arrivals), for the UI."""
        return [item.partition_key for item in self.items if item.version != self.version]


@dataclass(frozen=True)
class StepResult:
    """What a step hands to the next: the batch and this step's per-version outcomes."""

    batch: Batch
    outcomes: tuple[Any, ...] = ()


def normalize_trigger(value: str | None) -> str:
    return value if value in TRIGGERS else "manual"


def claim_batch(
    svc: Services,
    model_id: int,
    version: str,
    *,
    trigger: str | None = None,
    run_id: str | None = None,
) -> Batch:
    """Claim every pending version of `model_id` up to `version` (see the module docstring)."""
    trigger = normalize_trigger(trigger)
    with svc.db.session() as session:
        if session.get(Model, model_id) is None:
            raise InvalidInput(f"model {model_id} not found")
    target = _find_version(svc, model_id, version)
    up_to: int | None
    with svc.db.session() as session:
        if target is not None:
            up_to = target.version_number
        else:
            up_to = session.scalar(
                select(DatasetVersion.version_number)
                .where(DatasetVersion.model_id == model_id)
                .order_by(DatasetVersion.version_number.desc())
                .limit(1)
            )
    if up_to is None:
        return Batch(model_id, version, trigger, (), rescore=True, run_id=run_id)
    _open_external_jobs(svc, model_id, up_to)
    items = sorted(
        [*_claim_contributions(svc, model_id, up_to), *_pending_benchmarks(svc, model_id, up_to)],
        key=lambda item: (item.version_number, item.dataset_version_id),
    )
    rescore = trigger == "schedule" or not items
    log.info(
        "model %s run for %s: versions %s%s",
        model_id,
        version,
        ", ".join(item.version for item in items) or "none pending",
        " and a re-score" if rescore else "",
    )
    return Batch(model_id, version, trigger, tuple(items), rescore=rescore, run_id=run_id)


def _find_version(svc: Services, model_id: int, version: str) -> DatasetVersion | None:
    """The partition's version row (the arrival sensor records one for every arrival)."""
    with svc.db.session() as session:
        return session.scalar(
            select(DatasetVersion).where(
                DatasetVersion.model_id == model_id, DatasetVersion.version == version
            )
        )


def _read_manifest_object(store: ObjectStore, key: str) -> dict[str, Any] | None:
    """A `manifest.json` object: its JSON object, or a marker saying why it is unusable."""
    if not store.exists(key):
        return None
    try:
        with store.open(key) as fh:
            data = json.loads(fh.read(MANIFEST_MAX_BYTES + 1))
    except (ValueError, OSError):
        return {INVALID_MARK: "manifest.json is not valid JSON"}
    return data if isinstance(data, dict) else {INVALID_MARK: "manifest.json is not an object"}


def _open_external_jobs(svc: Services, model_id: int, up_to: int) -> None:
    """Give every external version without a job a queued contribution job."""
    with svc.db.session() as session:
        orphans = session.scalars(
            select(DatasetVersion).where(
                DatasetVersion.model_id == model_id,
                DatasetVersion.kind == "external",
                DatasetVersion.version_number <= up_to,
                ~exists().where(Contribution.dataset_version_id == DatasetVersion.id),
            )
        ).all()
    for row in orphans:
        with suppress(IntegrityError), svc.db.session() as session:
            session.add(
                Contribution(
                    model_id=model_id,
                    dataset_version_id=row.id,
                    submitter_id=EXTERNAL_SUBMITTER,
                    status=QUEUED,
                    submitted_rows=row.row_count or 0,
                    benchmark_spec_id=None,
                    # Unique per submitter: a concurrent run cannot open a second job.
                    idempotency_key=f"dataset-version:{row.id}",
                )
            )


def _claim_contributions(svc: Services, model_id: int, up_to: int) -> list[VersionItem]:
    with svc.db.session() as session:
        rows = session.execute(
            select(Contribution.id, DatasetVersion)
            .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
            .where(
                Contribution.model_id == model_id,
                Contribution.status == QUEUED,
                DatasetVersion.version_number <= up_to,
            )
            .order_by(DatasetVersion.version_number)
        ).all()
    claimed = []
    for job_id, dv in rows:
        if transition(svc.db, job_id, (QUEUED,), VALIDATING, reason=None):
            claimed.append(_item(dv, contribution_id=job_id))
    return claimed


def _pending_benchmarks(svc: Services, model_id: int, up_to: int) -> list[VersionItem]:
    with svc.db.session() as session:
        rows = session.execute(
            select(BenchmarkSpec.id, DatasetVersion)
            .join(DatasetVersion, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(
                BenchmarkSpec.model_id == model_id,
                DatasetVersion.version_number <= up_to,
                ~exists().where(Evaluation.dataset_version_id == DatasetVersion.id),
            )
            .order_by(DatasetVersion.version_number)
        ).all()
    return [_item(dv, benchmark_spec_id=spec_id) for spec_id, dv in rows]


def _item(dv: DatasetVersion, **ids: Any) -> VersionItem:
    return VersionItem(
        dataset_version_id=dv.id,
        model_id=dv.model_id,
        version=dv.version,
        version_number=dv.version_number,
        kind=dv.kind,
        object_key=dv.object_key,
        file_format=dv.file_format,
        **ids,
    )


def transition(
    db: Database, job_id: str, from_statuses: Sequence[str], to: str, **values: Any
) -> bool:
    """Move a job to `to` only if it is in one of `from_statuses`; True when it moved.

    One conditional UPDATE, so concurrent runs cannot both move the same job.
    """
    with db.session() as session:
        result = session.execute(
            update(Contribution)
            .where(Contribution.id == job_id, Contribution.status.in_(from_statuses))
            .values(status=to, updated_at=utcnow(), **values)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]


def job_status(db: Database, job_id: str) -> str | None:
    with db.session() as session:
        return session.scalar(select(Contribution.status).where(Contribution.id == job_id))


def _fail(db: Database, item: VersionItem, stage: str, exc: BaseException) -> None:
    log.exception("model %s %s: %s failed", item.model_id, item.version, stage)
    if item.contribution_id:
        transition(
            db,
            item.contribution_id,
            (VALIDATING, EVALUATING),
            FAILED,
            reason=f"unexpected error during {stage}: {type(exc).__name__}",
        )


# --- reading dataset versions --------------------------------------------------------------


def load_frame(store: ObjectStore, item: VersionItem) -> pd.DataFrame:
    """A version's file as a DataFrame, read with pyarrow (UnreadableDataset when invalid)."""
    from pipeline.quality import read_dataset

    with store.local_path(item.object_key) as path:
        return read_dataset(path, item.file_format)


@dataclass(frozen=True)
class VersionSummary:
    version: str
    kind: str
    readable: bool
    rows: int = 0
    columns: list[str] = field(default_factory=list)
    size_bytes: int | None = None
    error: str | None = None


def describe_batch(svc: Services, batch: Batch) -> list[VersionSummary]:
    """Read every version of the batch with pyarrow; an unreadable contribution is rejected."""
    from pipeline.quality import UnreadableDataset

    summaries = []
    for item in batch.items:
        try:
            frame = load_frame(svc.store, item)
        except (UnreadableDataset, FileNotFoundError) as exc:
            reason = f"unreadable dataset: {exc}"
            summaries.append(VersionSummary(item.version, item.kind, False, error=reason))
            if item.contribution_id:
                transition(svc.db, item.contribution_id, (VALIDATING,), REJECTED, reason=reason)
            continue
        except Exception as exc:
            _fail(svc.db, item, "reading the dataset", exc)
            summaries.append(
                VersionSummary(item.version, item.kind, False, error=type(exc).__name__)
            )
            continue
        summaries.append(
            VersionSummary(
                item.version,
                item.kind,
                True,
                rows=len(frame),
                columns=[str(c) for c in frame.columns],
                size_bytes=svc.store.size(item.object_key),
            )
        )
        with svc.db.session() as session:
            session.execute(
                update(DatasetVersion)
                .where(DatasetVersion.id == item.dataset_version_id)
                .values(row_count=len(frame), columns=[str(c) for c in frame.columns])
            )
            if item.kind == "external" and item.contribution_id:
                session.execute(
                    update(Contribution)
                    .where(Contribution.id == item.contribution_id)
                    .values(submitted_rows=len(frame))
                )
    return summaries


# --- checks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckOutcome:
    """One version's result in a check step."""

    version: str
    passed: bool
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckVerdict:
    """A check step's verdict over its batch, in the terms of a Dagster asset check.

    `passed` is false when any version failed. `blocking` is true when nothing is left for
    evaluation and rewards, so the failed check stops them; when other versions of the batch
    (or a re-score) still go on, the failure is reported without stopping them, and the failed
    versions are already `rejected`.
    """

    passed: bool
    blocking: bool
    description: str
    failed_versions: list[str]
    metadata: dict[str, Any]


def verdict(
    batch: Batch, outcomes: Sequence[CheckOutcome], db: Database, what: str
) -> CheckVerdict:
    failed = [o for o in outcomes if not o.passed]
    remaining = [
        item
        for item in batch.items
        if not item.is_contribution or job_status(db, item.contribution_id or "") == VALIDATING
    ]
    go_on = bool(remaining) or batch.rescore
    if failed:
        description = f"{what} failed for " + "; ".join(f"{o.version}: {o.summary}" for o in failed)
    elif outcomes:
        description = f"{what} passed for {', '.join(o.version for o in outcomes)}"
    else:
        description = f"no contribution to check for {what}"
    return CheckVerdict(
        passed=not failed,
        blocking=bool(failed) and not go_on,
        description=description[:2000],
        failed_versions=[o.version for o in failed],
        metadata={o.version: {"passed": o.passed, **o.figures} for o in outcomes},
    )


def readability_outcomes(summaries: Sequence[VersionSummary]) -> list[CheckOutcome]:
    return [
        CheckOutcome(s.version, s.readable, "readable" if s.readable else (s.error or "unreadable"))
        for s in summaries
    ]


def count_spec_violations(df: pd.DataFrame, data_spec: dict[str, Any], batch_size: int) -> int:
    """Rows of `df` that fail the model's data-spec (missing cells are absent properties)."""
    from pipeline.validation import RowValidator

    validator = RowValidator(data_spec)
    invalid = 0
    for start in range(0, len(df), batch_size):
        chunk = df.iloc[start : start + batch_size]
        for row in chunk.to_dict(orient="records"):
            invalid += not validator.is_valid(_json_row(row))
    return invalid


def _json_row(row: dict[Any, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in row.items():
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if hasattr(value, "item") and not isinstance(value, str | bytes):
            value = value.item()  # numpy scalar
        if value is not None and str(value) in {"NaT", "<NA>"}:
            continue
        clean[str(key)] = value
    return clean


def run_quality_checks(svc: Services, batch: Batch) -> list[CheckOutcome]:
    """Spec §8 thresholds and data-spec compliance for each contribution still validating."""
    from pipeline.quality import check_quality

    with svc.db.session() as session:
        model = session.get(Model, batch.model_id)
        data_spec = model.data_spec if model else {}
    outcomes = []
    for item in _still(svc.db, batch, VALIDATING):
        try:
            df = load_frame(svc.store, item)
            violations = count_spec_violations(df, data_spec, svc.settings.batch_size)
            report = check_quality(df, svc.settings, schema_violations=violations)
        except Exception as exc:
            _fail(svc.db, item, "quality checks", exc)
            outcomes.append(CheckOutcome(item.version, False, "quality checks could not run"))
            continue
        figures = report.to_dict()
        _merge_quality(svc.db, item, {"checks": figures})
        summary = quality_summary(report)
        if not report.passed:
            transition(
                svc.db,
                item.contribution_id or "",
                (VALIDATING,),
                REJECTED,
                reason=f"quality checks failed: {summary}",
            )
        outcomes.append(
            CheckOutcome(
                item.version,
                report.passed,
                summary,
                {
                    "row_count": report.row_count,
                    "completeness": round(report.completeness, 4),
                    "uniqueness": round(report.uniqueness, 4),
                    "schema_violations": report.schema_violations,
                },
            )
        )
    return outcomes


def quality_summary(report: QualityReport) -> str:
    """The failed checks in words (or the figures when all passed); no data values."""
    labels = {
        "row_count": "rows {observed} (at least {threshold} required)",
        "completeness": "completeness {observed:.1%} (above {threshold:.0%} required)",
        "uniqueness": "unique rows {observed:.1%} (above {threshold:.0%} required)",
        "schema_compliance": "{observed} rows violate the data-spec (100 % compliance required)",
        "column_completeness": "column {column} completeness {observed:.1%} "
        "(above {threshold:.0%} expected)",
    }
    failures = report.failures
    if not failures:
        text = (
            f"{report.row_count} rows, completeness {report.completeness:.1%}, "
            f"unique rows {report.uniqueness:.1%}, data-spec compliant"
        )
        if report.warnings:
            text += "; warnings: " + "; ".join(
                labels[c.name].format(**asdict(c)) for c in report.warnings
            )
        return text
    return "; ".join(labels.get(c.name, c.name).format(**asdict(c)) for c in failures)


def run_pii_scans(svc: Services, batch: Batch) -> list[CheckOutcome]:
    """Scan each contribution still validating; PII found rejects it (unless detection is off)."""
    from pipeline.pii import scan_frame

    outcomes = []
    for item in _still(svc.db, batch, VALIDATING):
        try:
            df = load_frame(svc.store, item)
            report = scan_frame(df, svc.settings)
        except Exception as exc:
            _fail(svc.db, item, "the PII scan", exc)
            outcomes.append(CheckOutcome(item.version, False, "the PII scan could not run"))
            continue
        figures = report.to_dict()
        _merge_quality(svc.db, item, {"pii": {**figures, "summary": report.summary()}})
        if report.found:
            transition(
                svc.db,
                item.contribution_id or "",
                (VALIDATING,),
                REJECTED,
                reason=f"PII scan failed: {report.summary()}",
            )
        outcomes.append(CheckOutcome(item.version, not report.found, report.summary(), figures))
    return outcomes


def _still(db: Database, batch: Batch, status: str) -> list[VersionItem]:
    return [
        item
        for item in batch.contributions()
        if job_status(db, item.contribution_id or "") == status
    ]


def _merge_quality(db: Database, item: VersionItem, values: dict[str, Any]) -> None:
    """Add keys to the job's `quality` figures (steps of one run write one after another)."""
    with db.session() as session:
        job = session.get(Contribution, item.contribution_id)
        if job is not None:
            job.quality = {**(job.quality or {}), **values}


# --- evaluation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class EvaluationOutcome:
    """One evaluation recorded by a run (a contribution measured, or a re-score)."""

    evaluation_id: str | None
    version: str | None
    kind: str  # contribution | rescore
    metric_name: str | None = None
    score: float | None = None
    baseline_score: float | None = None
    improvement_pct: float | None = None
    status: str | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BenchmarkData:
    spec_id: str
    metric_name: str
    metric_direction: str
    target_column: str
    input_columns: list[str]
    frame: Any  # pandas DataFrame: rows of the evaluation split


class _Frames:
    """Dataset frames read once per step; accepted training versions are read in parallel."""

    def __init__(self, svc: Services) -> None:
        self.svc = svc
        self._frames: dict[int, Any] = {}
        self._benchmarks: dict[str, BenchmarkData] = {}

    def version(self, item: VersionItem) -> pd.DataFrame:
        if item.dataset_version_id not in self._frames:
            self._frames[item.dataset_version_id] = load_frame(self.svc.store, item)
        return self._frames[item.dataset_version_id]

    def many(self, items: Sequence[VersionItem]) -> list[pd.DataFrame]:
        missing = [i for i in items if i.dataset_version_id not in self._frames]
        if missing:
            workers = max(1, min(self.svc.settings.parallel_workers, len(missing)))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for item, frame in zip(
                    missing, pool.map(lambda i: load_frame(self.svc.store, i), missing), strict=True
                ):
                    self._frames[item.dataset_version_id] = frame
        return [self._frames[i.dataset_version_id] for i in items]

    def benchmark(self, spec: BenchmarkSpec) -> BenchmarkData:
        if spec.id not in self._benchmarks:
            with self.svc.db.session() as session:
                dv = session.get(DatasetVersion, spec.dataset_version_id)
            if dv is None:
                raise DomainError(f"benchmark {spec.id} has no dataset version")
            frame = benchmark_eval_rows(load_frame(self.svc.store, _item(dv)), spec.eval_split)
            self._benchmarks[spec.id] = BenchmarkData(
                spec.id,
                spec.metric_name,
                spec.metric_direction,
                spec.target_column,
                list(spec.input_columns or []),
                frame,
            )
        return self._benchmarks[spec.id]


SPLIT_COLUMN = "split"


def benchmark_eval_rows(frame: pd.DataFrame, eval_split: str) -> pd.DataFrame:
    """The rows a benchmark is scored on.

    With a `split` column, the rows whose split equals `eval_split` (none is an error);
    without one, every row. The split column itself is dropped.
    """
    if SPLIT_COLUMN not in frame.columns:
        return frame
    rows = frame[frame[SPLIT_COLUMN].astype(str) == eval_split]
    if rows.empty:
        raise DomainError(f"the benchmark has no rows with split {eval_split!r}")
    return rows.drop(columns=[SPLIT_COLUMN]).reset_index(drop=True)


def latest_benchmark(db: Database, model_id: int) -> BenchmarkSpec | None:
    """The model's newest BenchmarkSpec: the one on the highest dataset version."""
    with db.session() as session:
        return session.scalar(
            select(BenchmarkSpec)
            .join(DatasetVersion, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(BenchmarkSpec.model_id == model_id)
            .order_by(DatasetVersion.version_number.desc(), BenchmarkSpec.created_at.desc())
            .limit(1)
        )


def accepted_items(
    db: Database, model_id: int, exclude_job: str | None = None
) -> list[VersionItem]:
    """Versions whose rows train the model (see the module docstring)."""
    with db.session() as session:
        rows = session.execute(
            select(Contribution.id, DatasetVersion)
            .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
            .where(
                Contribution.model_id == model_id,
                or_(
                    Contribution.status == REWARDED,
                    and_(Contribution.status == EVALUATING, Contribution.improvement_pct > 0),
                ),
            )
            .order_by(DatasetVersion.version_number)
        ).all()
    return [_item(dv, contribution_id=job) for job, dv in rows if job != exclude_job]


def evaluate_batch(svc: Services, batch: Batch) -> list[EvaluationOutcome]:
    """Evaluate the batch in version order, then re-score the model when the batch asks for it."""
    frames = _Frames(svc)
    outcomes: list[EvaluationOutcome] = []
    for item in batch.items:
        if item.benchmark_spec_id is not None:
            outcomes.append(
                _guarded_rescore(item.version, partial(_rescore_on, svc, frames, batch, item))
            )
        elif item.is_contribution and job_status(svc.db, item.contribution_id or "") == VALIDATING:
            outcomes.append(_evaluate_contribution(svc, frames, batch, item))
    if batch.rescore:
        outcomes.append(
            _guarded_rescore(
                None,
                lambda: rescore_model(
                    svc, batch.model_id, trigger=batch.trigger, run_id=batch.run_id, frames=frames
                ),
            )
        )
    return outcomes


def _guarded_rescore(
    version: str | None, score: Callable[[], EvaluationOutcome | None]
) -> EvaluationOutcome:
    """A re-score that cannot stop the rest of the run; its failure is reported in the outcome."""
    try:
        outcome = score()
    except Exception as exc:
        log.exception("re-score for %s failed", version or "the model")
        detail = exc.detail if isinstance(exc, DomainError) else type(exc).__name__
        return EvaluationOutcome(
            None, version, "rescore", status=FAILED, detail=f"re-score failed: {detail}"
        )
    if outcome is None:
        return EvaluationOutcome(None, version, "rescore", detail="no benchmark: nothing to score")
    return outcome


def _model_settings(db: Database, model_id: int) -> tuple[str, str]:
    with db.session() as session:
        model = session.get(Model, model_id)
        if model is None:
            raise InvalidInput(f"model {model_id} not found")
        return model.task_type, model.estimator


def _evaluate_contribution(
    svc: Services, frames: _Frames, batch: Batch, item: VersionItem
) -> EvaluationOutcome:
    from pipeline.evaluation import evaluate_contribution

    job_id = item.contribution_id or ""
    spec = latest_benchmark(svc.db, batch.model_id)
    if spec is None:
        reason = "checks passed; waiting for a benchmark: the model has no BenchmarkSpec yet"
        transition(svc.db, job_id, (VALIDATING,), QUEUED, reason=reason)
        return EvaluationOutcome(None, item.version, "contribution", status=QUEUED, detail=reason)
    if not transition(svc.db, job_id, (VALIDATING,), EVALUATING):
        return EvaluationOutcome(None, item.version, "contribution", detail="claimed elsewhere")
    try:
        task_type, estimator = _model_settings(svc.db, batch.model_id)
        bench = frames.benchmark(spec)
        base_items = accepted_items(svc.db, batch.model_id, exclude_job=job_id)
        base = _concat(frames.many(base_items))
        result = evaluate_contribution(
            base,
            frames.version(item),
            bench.frame,
            task_type=task_type,
            estimator=estimator,
            target_column=bench.target_column,
            input_columns=bench.input_columns or None,
            metric_name=bench.metric_name,
            metric_direction=bench.metric_direction,
        )
    except DomainError as exc:
        reason = f"evaluation refused the data: {exc.detail}"
        transition(svc.db, job_id, (EVALUATING,), REJECTED, reason=reason)
        return EvaluationOutcome(None, item.version, "contribution", status=REJECTED, detail=reason)
    except Exception as exc:
        _fail(svc.db, item, "evaluation", exc)
        return EvaluationOutcome(
            None, item.version, "contribution", status=FAILED, detail=str(type(exc).__name__)
        )
    change = (
        f"{bench.metric_name} {result.score_without:.4f} → {result.score_with:.4f} "
        f"({result.improvement_pct:+.2f} %)"
    )
    with svc.db.session() as session:
        evaluation = Evaluation(
            model_id=batch.model_id,
            dataset_version_id=item.dataset_version_id,
            benchmark_spec_id=spec.id,
            trigger=batch.trigger,
            metric_name=bench.metric_name,
            metric_direction=bench.metric_direction,
            score=result.score_with,
            baseline_score=result.score_without,
            improvement_pct=result.improvement_pct,
            run_id=batch.run_id,
        )
        session.add(evaluation)
        session.flush()
        evaluation_id = evaluation.id
        session.execute(
            update(Contribution)
            .where(Contribution.id == job_id)
            .values(improvement_pct=result.improvement_pct, updated_at=utcnow())
        )
    if result.improvement_pct > 0:
        status, detail = EVALUATING, f"improved {change}; rewards pending"
        transition(svc.db, job_id, (EVALUATING,), EVALUATING, reason=detail)
    else:
        status, detail = REJECTED, f"no improvement: {change}"
        transition(svc.db, job_id, (EVALUATING,), REJECTED, reason=detail)
    return EvaluationOutcome(
        evaluation_id,
        item.version,
        "contribution",
        metric_name=bench.metric_name,
        score=result.score_with,
        baseline_score=result.score_without,
        improvement_pct=result.improvement_pct,
        status=status,
        detail=detail,
    )


def _concat(frames: Sequence[pd.DataFrame]) -> pd.DataFrame | None:
    import pandas as pd

    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None


def _rescore_on(
    svc: Services, frames: _Frames, batch: Batch, item: VersionItem
) -> EvaluationOutcome:
    with svc.db.session() as session:
        spec = session.get(BenchmarkSpec, item.benchmark_spec_id)
    if spec is None:
        return EvaluationOutcome(None, item.version, "rescore", detail="benchmark spec is gone")
    outcome = rescore_model(
        svc,
        batch.model_id,
        trigger=batch.trigger,
        run_id=batch.run_id,
        spec=spec,
        dataset_version_id=item.dataset_version_id,
        frames=frames,
    )
    return outcome or EvaluationOutcome(None, item.version, "rescore", detail="not scored")


def rescore_model(
    svc: Services,
    model_id: int,
    *,
    trigger: str,
    run_id: str | None = None,
    spec: BenchmarkSpec | None = None,
    dataset_version_id: int | None = None,
    frames: _Frames | None = None,
) -> EvaluationOutcome | None:
    """Score the model trained on all accepted rows; records an Evaluation (metric history).

    `baseline_score` is the trivial baseline (majority class or mean) and `improvement_pct`
    the model's gain over it. Returns None when the model has no benchmark.
    """
    from pipeline.evaluation import evaluate_contribution

    frames = frames or _Frames(svc)
    spec = spec or latest_benchmark(svc.db, model_id)
    if spec is None:
        log.info("model %s has no benchmark; nothing to re-score", model_id)
        return None
    task_type, estimator = _model_settings(svc.db, model_id)
    bench = frames.benchmark(spec)
    accepted = _concat(frames.many(accepted_items(svc.db, model_id)))
    import pandas as pd

    result = evaluate_contribution(
        None,
        accepted if accepted is not None else pd.DataFrame(),
        bench.frame,
        task_type=task_type,
        estimator=estimator,
        target_column=bench.target_column,
        input_columns=bench.input_columns or None,
        metric_name=bench.metric_name,
        metric_direction=bench.metric_direction,
    )
    with svc.db.session() as session:
        evaluation = Evaluation(
            model_id=model_id,
            dataset_version_id=dataset_version_id,
            benchmark_spec_id=spec.id,
            trigger=normalize_trigger(trigger),
            metric_name=bench.metric_name,
            metric_direction=bench.metric_direction,
            score=result.score_with,
            baseline_score=result.score_without,
            improvement_pct=result.improvement_pct,
            run_id=run_id,
        )
        session.add(evaluation)
        session.flush()
        evaluation_id = evaluation.id
    with svc.db.session() as session:
        version = (
            session.scalar(
                select(DatasetVersion.version).where(DatasetVersion.id == dataset_version_id)
            )
            if dataset_version_id
            else None
        )
    return EvaluationOutcome(
        evaluation_id,
        version,
        "rescore",
        metric_name=bench.metric_name,
        score=result.score_with,
        baseline_score=result.score_without,
        improvement_pct=result.improvement_pct,
        detail=f"{bench.metric_name} {result.score_with:.4f} trained on "
        f"{result.train_rows_with} accepted rows",
    )


# --- rewards -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RewardOutcome:
    version: str
    evaluation_id: str
    tokens: float  # paid, the sum of the ledger entries
    earned: float  # what the formula gave
    recipients: list[dict[str, Any]]
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pay_batch(
    svc: Services, model_id: int, outcomes: Sequence[EvaluationOutcome]
) -> list[RewardOutcome]:
    """Reward each contribution found improving; idempotent per evaluation.

    Besides this run's evaluations, any of the model's contributions left `evaluating` with a
    positive improvement (a run that stopped between evaluation and rewards) is paid now.
    """
    evaluation_ids = [
        o.evaluation_id for o in outcomes if o.kind == "contribution" and o.evaluation_id
    ]
    for stranded in stranded_evaluations(svc.db, model_id):
        if stranded not in evaluation_ids:
            evaluation_ids.append(stranded)
    paid = []
    for evaluation_id in evaluation_ids:
        result = pay_evaluation(svc, evaluation_id)
        if result is not None:
            paid.append(result)
    return paid


def stranded_evaluations(db: Database, model_id: int) -> list[str]:
    """Latest evaluation of each improving contribution still waiting for its rewards."""
    with db.session() as session:
        rows = session.execute(
            select(Evaluation.id, Evaluation.dataset_version_id)
            .join(Contribution, Contribution.dataset_version_id == Evaluation.dataset_version_id)
            .where(
                Contribution.model_id == model_id,
                Contribution.status == EVALUATING,
                Contribution.improvement_pct > 0,
            )
            .order_by(Evaluation.created_at)
        ).all()
    latest = {dv_id: evaluation_id for evaluation_id, dv_id in rows}
    return list(latest.values())


def pay_evaluation(svc: Services, evaluation_id: str) -> RewardOutcome | None:
    """Write the ledger for one contribution evaluation and mark the job `rewarded`.

    Ledger rows are unique per (evaluation, wallet): a re-run finds them and writes nothing.
    Returns None when the evaluation measured no improving contribution.
    """
    from pipeline.rewards import QualityFactors, compute_reward, recipients, split_reward

    with svc.db.session() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        if evaluation is None or evaluation.dataset_version_id is None:
            return None
        job = session.scalar(
            select(Contribution).where(
                Contribution.dataset_version_id == evaluation.dataset_version_id
            )
        )
        dv = session.get(DatasetVersion, evaluation.dataset_version_id)
        existing = session.scalars(
            select(RewardEntry).where(RewardEntry.evaluation_id == evaluation_id)
        ).all()
    if job is None or dv is None or (evaluation.improvement_pct or 0) <= 0:
        return None
    if job.status not in (EVALUATING, REWARDED):
        return None
    if job.status == REWARDED or existing:
        return RewardOutcome(
            dv.version,
            evaluation_id,
            float(job.tokens or sum(e.tokens for e in existing)),
            float(job.tokens or 0.0),
            [{"wallet": e.wallet_address, "tokens": e.tokens} for e in existing],
            "already paid",
        )
    checks = (job.quality or {}).get("checks", {})
    factors = QualityFactors(
        completeness=float(_clamp(checks.get("completeness", 1.0))),
        uniqueness=float(_clamp(checks.get("uniqueness", 1.0))),
        row_count=int(checks.get("row_count", job.submitted_rows) or 0),
        passed=True,
    )
    breakdown = compute_reward(float(evaluation.improvement_pct or 0.0), factors)
    manifest, source, problem = resolve_manifest(svc, job, dv)
    parts: list[tuple[str, float]] = []
    if manifest is not None and breakdown.total_tokens > 0:
        parts = [
            (w, t) for w, t in split_reward(breakdown.total_tokens, recipients(manifest)) if t > 0
        ]
    improvement = f"+{evaluation.improvement_pct:.2f} % {evaluation.metric_name}"
    if manifest is None:
        detail = (
            f"accepted ({improvement}); earned {breakdown.total_tokens:g} tokens but nothing was "
            f"paid: {problem}"
        )
    else:
        detail = (
            f"rewarded {breakdown.total_tokens:g} tokens for {improvement} (manifest: {source})"
        )
    try:
        with svc.db.session() as session:
            for wallet, tokens in parts:
                session.add(
                    RewardEntry(
                        evaluation_id=evaluation_id,
                        contribution_id=job.id,
                        model_id=job.model_id,
                        wallet_address=canonical_wallet(wallet),
                        tokens=tokens,
                    )
                )
            job_row = session.get(Contribution, job.id, with_for_update=True)
            if job_row is None or job_row.status != EVALUATING:
                raise _AlreadyPaid
            job_row.status = REWARDED
            job_row.tokens = math.fsum(t for _, t in parts)
            job_row.reason = detail
            job_row.updated_at = utcnow()
            job_row.quality = {
                **(job_row.quality or {}),
                "reward": {
                    **breakdown.as_dict(),
                    "manifest_source": source,
                    "recipients": [{"wallet": canonical_wallet(w), "tokens": t} for w, t in parts],
                },
            }
    except (IntegrityError, _AlreadyPaid):
        log.info("evaluation %s was paid concurrently", evaluation_id)
        return pay_evaluation(svc, evaluation_id)
    return RewardOutcome(
        dv.version,
        evaluation_id,
        math.fsum(t for _, t in parts),
        breakdown.total_tokens,
        [{"wallet": canonical_wallet(w), "tokens": t} for w, t in parts],
        detail,
    )


class _AlreadyPaid(Exception):
    pass


def _clamp(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return min(1.0, max(0.0, number)) if math.isfinite(number) else 0.0


def canonical_wallet(address: str) -> str:
    """The EIP-55 spelling: the ledger stores and looks wallets up in one spelling."""
    from pipeline.rewards import to_checksum_address

    return to_checksum_address(address)


def resolve_manifest(svc: Services, job: Contribution, dv: DatasetVersion) -> tuple[Any, str, str]:
    """(manifest, source, problem): the version's own manifest, else the submitter's stored one.

    A manifest stored with the version wins even when it is invalid (then nothing is paid, and
    the problem says why): paying the submitter's default wallet instead could pay the wrong
    party of a multi-contributor dataset.
    """
    from pipeline.rewards import parse_manifest

    data: dict[str, Any] | None = dv.manifest
    source = "dataset version"
    if data is None:
        data = _read_manifest_object(
            svc.store, dataset_key(dv.model_id, dv.version, MANIFEST_FILENAME)
        )
        source = MANIFEST_FILENAME
    if data is None:
        with svc.db.session() as session:
            profile = session.get(ContributorProfile, job.submitter_id)
            data = profile.manifest if profile else None
        source = "contributor profile"
    if data is None:
        return (
            None,
            "",
            (
                "no contributor manifest: none came with the contribution and the submitter "
                "has none stored (PUT /api/contributors/me)"
            ),
        )
    if INVALID_MARK in data:
        return None, source, f"the {source} manifest is invalid: {data[INVALID_MARK]}"
    try:
        return parse_manifest(data), source, ""
    except InvalidInput as exc:
        return None, source, f"the {source} manifest is invalid: {exc.detail}"
