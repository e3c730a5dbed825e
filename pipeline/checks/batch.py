"""Checks of the contributions in a batch: readable file, spec §8 quality, PII, integrity.

A contribution is checked while its job is `validating`. The steps run in order: reading the
file with pyarrow (`describe_batch`), the spec §8 quality thresholds with data-spec compliance
(`run_quality_checks`), the PII scan (`run_pii_scans`), then benchmark leakage, rows already
accepted and label poisoning (`run_integrity_checks`, see `pipeline.checks.integrity`). A check that
fails moves the job to
`rejected` with the reason; an unexpected error moves it to `failed`. A job that passes all of
them stays `validating` for `pipeline.rewards.batch_scoring`. Figures are merged into the job's
`quality`.

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
from sqlalchemy import update

from pipeline.checks.benchmark_fingerprints import ensure_benchmark_fingerprints, model_benchmarks
from pipeline.checks.compliance import count_violations, json_value
from pipeline.checks.integrity import ModelIntegrity
from pipeline.checks.pii_tables import scan_frame
from pipeline.checks.quality import QualityReport, check_quality
from pipeline.core.db import Database
from pipeline.core.tables import (
    EXTERNAL_VERSION,
    REJECTED,
    VALIDATING,
    Contribution,
    DatasetVersion,
    Model,
)
from pipeline.evaluation.batches import Batch, VersionItem, load_frame
from pipeline.evaluation.jobs import fail_job, job_status, transition
from pipeline.models.dataspec import RowValidator
from pipeline.store.json_columns import decode_json_cell
from pipeline.store.reading import JSON_COLUMNS_ATTR, UnreadableDataset

if TYPE_CHECKING:
    from pipeline.services import Services

log = logging.getLogger(__name__)


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
            fail_job(svc.db, item, "reading the dataset", exc)
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
            if item.kind == EXTERNAL_VERSION and item.contribution_id:
                session.execute(
                    update(Contribution)
                    .where(Contribution.id == item.contribution_id)
                    .values(submitted_rows=len(frame))
                )
    return summaries


@dataclass(frozen=True)
class CheckOutcome:
    """One version's result in a check step."""

    version: str
    passed: bool
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckVerdict:
    """A check step's verdict over its batch: passed or not, and the figures behind it.

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


def count_spec_violations(
    data: pd.DataFrame | pa.Table, data_spec: dict[str, Any], batch_size: int
) -> int:
    """Rows that fail the model's data-spec (missing cells are absent properties).

    Checked with Arrow compute where the data-spec allows it (pipeline/checks/compliance.py); a
    DataFrame is handed to Arrow first, so a NaN there is a missing cell, as pandas means it.
    The JSON-text columns of a stored contribution (named in the frame's
    `attrs[JSON_COLUMNS_ATTR]` by read_dataset) are read as the values they encode.
    """
    encoded: frozenset[str] = frozenset()
    if not isinstance(data, pa.Table):
        encoded = frozenset(data.attrs.get(JSON_COLUMNS_ATTR, ()))
        try:
            data = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return _count_frame_rows(data, data_spec, batch_size, encoded)
    return count_violations(data, data_spec, batch_size, encoded)


def _count_frame_rows(
    df: pd.DataFrame, data_spec: dict[str, Any], batch_size: int, encoded: frozenset[str]
) -> int:
    """Row by row, for a frame whose columns mix types Arrow can't hold in one column."""
    validator = RowValidator(data_spec)
    invalid = 0
    for start in range(0, len(df), batch_size):
        chunk = df.iloc[start : start + batch_size]
        for row in chunk.to_dict(orient="records"):
            try:
                invalid += not validator.is_valid(_json_row(row, encoded))
            except ValueError:  # a cell with no JSON value
                invalid += 1
    return invalid


def _json_row(row: dict[Any, Any], encoded: frozenset[str]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in row.items():
        if hasattr(value, "item") and not isinstance(value, str | bytes):
            value = value.item()  # numpy scalar
        if value is None or value is pd.NA or value is pd.NaT:
            continue
        if isinstance(value, float) and math.isnan(value):
            continue
        name = str(key)
        clean[name] = decode_json_cell(value) if name in encoded else json_value(value)
    return clean


def run_quality_checks(svc: Services, batch: Batch) -> list[CheckOutcome]:
    """Spec §8 thresholds and data-spec compliance for each contribution still validating."""
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
            fail_job(svc.db, item, "quality checks", exc)
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
    outcomes = []
    for item in _still(svc.db, batch, VALIDATING):
        try:
            df = load_frame(svc.store, item)
            report = scan_frame(df, svc.settings)
        except Exception as exc:
            fail_job(svc.db, item, "the PII scan", exc)
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


INTEGRITY_VERDICTS = {
    "benchmark_copies": "benchmark leakage",
    "known_rows": "already contributed",
    "labels": "labels quarantined",
}


def run_integrity_checks(svc: Services, batch: Batch) -> list[CheckOutcome]:
    """Leakage, known rows and labels of each contribution still validating.

    A benchmark version in the batch is fingerprinted if it was not at upload. Without any
    benchmark the contributions pass here: evaluation sends them back to the queue, and the
    run after a benchmark arrives checks them.
    """
    in_batch = {item.dataset_version_id for item in batch.items if item.benchmark_spec_id}
    for ref in model_benchmarks(svc, batch.model_id):
        if ref.item.dataset_version_id in in_batch:
            try:
                ensure_benchmark_fingerprints(svc, ref)
            except Exception:  # the contributions' check below tries again and reports it
                log.exception("model %s %s: fingerprinting failed", batch.model_id, ref.version)
    pending = _still(svc.db, batch, VALIDATING)
    if not pending:
        return []
    try:
        model = ModelIntegrity(svc, batch.model_id)
    except Exception as exc:
        for item in pending:
            fail_job(svc.db, item, "the integrity checks", exc)
        return [_integrity_error(item) for item in pending]
    with model:
        return [_check_integrity(svc, model, item) for item in pending]


def _check_integrity(svc: Services, model: ModelIntegrity, item: VersionItem) -> CheckOutcome:
    if not model.has_benchmark:
        return CheckOutcome(item.version, True, "no benchmark yet: checked when one arrives", {})
    try:
        report = model.inspect(load_frame(svc.store, item), job_id=item.contribution_id)
    except Exception as exc:
        fail_job(svc.db, item, "the integrity checks", exc)
        return _integrity_error(item)
    figures = report.figures()
    _merge_quality(svc.db, item, {"integrity": figures})
    reason = report.reason()
    if reason is not None:
        # The submitter's words (pipeline.checks.disclosure); the figures stay in `quality`.
        transition(svc.db, item.contribution_id or "", (VALIDATING,), REJECTED, reason=reason)
    # The Dagster UI is the operators': its check says it with the figures.
    summary = report.detail() or integrity_summary(figures)
    return CheckOutcome(item.version, reason is None, summary, figures)


def _integrity_error(item: VersionItem) -> CheckOutcome:
    return CheckOutcome(
        item.version, False, "the integrity checks could not run", {"verdict": "error"}
    )


def integrity_summary(figures: dict[str, Any]) -> str:
    text = (
        f"{figures['rows']} rows: {figures['benchmark_copies']} benchmark copies, "
        f"{figures['known_rows']} already accepted"
    )
    if figures.get("label_disagreement") is not None:
        text += (
            f", label disagreement {figures['label_disagreement']:.1%} "
            f"(reference {figures['reference_disagreement']:.1%})"
        )
    else:
        text += f", labels {figures.get('label_check', 'not measured')}"
    return text


def integrity_outcomes(outcomes: Sequence[CheckOutcome], check: str) -> list[CheckOutcome]:
    """The integrity step's outcomes as one of its checks sees them (`INTEGRITY_VERDICTS`)."""
    failing = {INTEGRITY_VERDICTS[check], "error"}
    return [
        CheckOutcome(o.version, o.figures.get("verdict") not in failing, o.summary, o.figures)
        for o in outcomes
    ]


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
