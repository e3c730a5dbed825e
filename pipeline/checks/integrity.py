"""Integrity of contributions before valuation: benchmark leakage, known rows, label poisoning.

Run by the pipeline after the quality and PII checks, for each contribution still
`validating` (`pipeline.checks.batch.run_integrity_checks`):

1. Benchmark leakage. Every benchmark version of the model is fingerprinted at upload
   (`fingerprint_benchmark_file`, called by `pipeline.intake.uploads`), or by the pipeline when its
   fingerprints are missing (`ensure_benchmark_fingerprints`). The contribution's rows are
   matched against each version in every tier of `pipeline.checks.fingerprints`; in a tier whose
   chance rate is p (the share of the benchmark's own rows matching another of its rows), an
   honest contribution of n rows is expected to match about n*p rows. The contribution is
   rejected when, in some tier, more rows match than
   `n*p + 3*sqrt(n*p*(1-p)) + INTEGRITY_COPY_TOLERANCE * n` (default tolerance 1 %): a copy
   of benchmark rows, exact or with small noise, is never paid nor trained on.
2. Known rows. Rows that match rows of the model's accepted training data (`accepted_items`:
   any earlier accepted contribution, from anyone) are counted and left out of valuation
   (`novel_rows`). Only tiers whose chance rate, scaled to the accepted data's size, is at most
   `KNOWN_CHANCE_MAX` decide per row, so honest rows of a dense table are not taken for
   copies. A contribution whose novel rows are less than `INTEGRITY_MIN_NOVEL_SHARE` (default
   5 %) of its rows is rejected as already contributed.
3. Labels (`pipeline.checks.labels`): the novel rows' labels are checked against the current model
   and against their own cross-validated predictions; far more disagreement than the reference
   data shows quarantines the contribution (`rejected`, the figures in the reason).

The figures go to the job's `quality["integrity"]`. Accepted rows' fingerprints are derived
from the accepted versions when needed and cached per version and scheme in the object store
(`integrity/{model_id}/accepted/...`, outside `datasets/`, so no arrival is triggered); the
cache is written atomically and is a pure function of an immutable version, so concurrent runs
can only write the same bytes, and which versions count is read from the database each time.

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from sqlalchemy import select

from pipeline.checks.dataset_batches import RetypeColumns, file_batches
from pipeline.checks.fingerprint_files import (
    FingerprintFormatError,
    Fingerprints,
    FingerprintSummary,
    fingerprint_file,
    open_fingerprints,
    read_footer,
)
from pipeline.checks.fingerprints import (
    RowKeys,
    Scheme,
    fingerprint_columns,
    frame_keys,
    match_rows,
)
from pipeline.checks.labels import MIN_REFERENCE_ROWS, LabelReport, check_labels
from pipeline.checks.quality import read_dataset
from pipeline.core.tables import BenchmarkSpec, DatasetVersion, Model
from pipeline.evaluation.batches import Services, VersionItem, load_frame, version_item
from pipeline.evaluation.datasets import accepted_items

log = logging.getLogger(__name__)

PREFIX = "integrity"
# A tier decides per row whether a row is already known only when honest rows match the
# accepted data by chance at most this often.
KNOWN_CHANCE_MAX = 0.01
# Rows of a benchmark read for the label check's reference (a seeded sample).
LABEL_REFERENCE_ROWS = 2_000


def benchmark_fingerprint_key(model_id: int, version: str) -> str:
    return f"{PREFIX}/{model_id}/{version}/benchmark.fingerprints"


def accepted_keys_key(model_id: int, dataset_version_id: int, scheme: Scheme) -> str:
    return f"{PREFIX}/{model_id}/accepted/{dataset_version_id}-{scheme.digest}.npy"


# --- benchmark fingerprints ------------------------------------------------------------------


def fingerprint_benchmark_file(
    path: Path,
    file_format: str,
    *,
    columns: Sequence[str],
    target_column: str,
    input_columns: Sequence[str],
    task_type: str,
    out: Path,
    tmp_root: Path,
) -> FingerprintSummary:
    """Fingerprint a benchmark file's rows (input columns and target) into the file `out`."""
    return fingerprint_file(
        path,
        file_format,
        columns=fingerprint_columns(columns, target_column, input_columns),
        target=target_column,
        classification=task_type == "classification",
        out=out,
        tmp_root=tmp_root,
    )


@dataclass(frozen=True)
class BenchmarkRef:
    """One benchmark version of a model: where its file and fingerprints are."""

    spec_id: str
    model_id: int
    version: str
    version_number: int
    item: VersionItem
    target_column: str
    input_columns: tuple[str, ...]
    columns: tuple[str, ...]

    @property
    def fingerprint_key(self) -> str:
        return benchmark_fingerprint_key(self.model_id, self.version)


def model_benchmarks(svc: Services, model_id: int) -> list[BenchmarkRef]:
    """Every benchmark version of the model, newest first."""
    with svc.db.session() as session:
        rows = session.execute(
            select(BenchmarkSpec, DatasetVersion)
            .join(DatasetVersion, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(BenchmarkSpec.model_id == model_id)
            .order_by(DatasetVersion.version_number.desc(), BenchmarkSpec.created_at.desc())
        ).all()
    return [
        BenchmarkRef(
            spec.id,
            model_id,
            dv.version,
            dv.version_number,
            version_item(dv, benchmark_spec_id=spec.id),
            spec.target_column,
            tuple(spec.input_columns or ()),
            tuple(dv.columns or spec.columns or ()),
        )
        for spec, dv in rows
    ]


def _task_type(svc: Services, model_id: int) -> tuple[str, str]:
    with svc.db.session() as session:
        model = session.get(Model, model_id)
        if model is None:
            raise LookupError(f"model {model_id} not found")
        return model.task_type, model.estimator


def ensure_benchmark_fingerprints(svc: Services, ref: BenchmarkRef) -> str:
    """The key of the benchmark's fingerprints, building and storing them when missing.

    Benchmarks uploaded through the API are fingerprinted at upload; this covers the others
    (and any older than fingerprints). Building twice concurrently writes the same bytes.
    """
    key = ref.fingerprint_key
    if svc.store.exists(key):
        return key
    task_type, _ = _task_type(svc, ref.model_id)
    tmp_root = svc.settings.data_dir / "tmp" / "fingerprints"
    tmp_root.mkdir(parents=True, exist_ok=True)
    with svc.store.local_path(ref.item.object_key) as path:
        columns = ref.columns or tuple(_file_columns(path, ref.item.file_format))
        handle, name = tempfile.mkstemp(dir=tmp_root, suffix=".fingerprints")
        os.close(handle)
        out = Path(name)
        try:
            summary = fingerprint_benchmark_file(
                path,
                ref.item.file_format,
                columns=columns,
                target_column=ref.target_column,
                input_columns=ref.input_columns,
                task_type=task_type,
                out=out,
                tmp_root=tmp_root,
            )
            svc.store.put_file(key, out)
        finally:
            out.unlink(missing_ok=True)
    log.info(
        "model %s %s: fingerprinted %d benchmark rows", ref.model_id, ref.version, summary.rows
    )
    return key


def _file_columns(path: Path, file_format: str) -> list[str]:
    return [str(c) for c in read_dataset(path, file_format).columns]


@contextlib.contextmanager
def opened_fingerprints(svc: Services, key: str) -> Iterator[Fingerprints]:
    with svc.store.local_path(key) as path, open_fingerprints(path) as fingerprints:
        yield fingerprints


def benchmark_summary(svc: Services, key: str) -> FingerprintSummary:
    with svc.store.local_path(key) as path:
        return FingerprintSummary.from_json(read_footer(path))


# --- leakage ---------------------------------------------------------------------------------


def allowance(rows: int, chance_rate: float, tolerance: float) -> float:
    """Matching rows an honest contribution of `rows` rows may show in a tier."""
    p = min(1.0, max(0.0, chance_rate))
    return rows * p + 3 * math.sqrt(rows * p * (1 - p)) + tolerance * rows


@dataclass(frozen=True)
class Leakage:
    """How many rows of a contribution copy one benchmark version's rows."""

    rows: int
    benchmark_version: str
    tier: str  # the tier with the largest excess over chance
    copies: int
    expected: float
    allowed: float
    exact_copies: int
    per_tier: dict[str, int] = field(default_factory=dict)

    @property
    def leaked(self) -> bool:
        return self.copies > self.allowed


def count_benchmark_copies(
    keys: RowKeys, fingerprints: Fingerprints, *, tolerance: float, version: str
) -> Leakage:
    """Copies per tier; the verdict uses the tier whose copies most exceed its allowance."""
    matched = match_rows(keys, fingerprints.tier_keys)
    rows = keys.rows
    best: Leakage | None = None
    per_tier = {}
    for tier, hits in zip(fingerprints.summary.tiers, matched, strict=True):
        copies = int(hits.sum())
        per_tier[tier.name] = copies
        candidate = Leakage(
            rows,
            version,
            tier.name,
            copies,
            rows * tier.chance_rate,
            allowance(rows, tier.chance_rate, tolerance),
            int(matched[0].sum()),
        )
        if best is None or (candidate.copies - candidate.allowed) > (best.copies - best.allowed):
            best = candidate
    assert best is not None
    return replace(best, per_tier=per_tier)


def copy_rule(tier: str, scheme: Scheme) -> str:
    """The matching rule of a tier, in words."""
    if tier == "exact":
        return "identical values to about 7 significant digits"
    width = float(tier.removeprefix("near_"))
    return f"values within {width * scheme.margin:g} to {width:g} standard deviations per column"


# --- known rows ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AcceptedKeys:
    """The distinct keys of the model's accepted rows under one scheme, per tier."""

    scheme: Scheme
    rows: int
    tier_keys: list[np.ndarray]


def accepted_row_keys(svc: Services, item: VersionItem, scheme: Scheme) -> np.ndarray:
    """(rows, tiers) keys of one accepted version's rows; cached in the object store."""
    key = accepted_keys_key(item.model_id, item.dataset_version_id, scheme)
    if svc.store.exists(key):
        try:
            with svc.store.open(key) as fh:
                cached = np.load(io.BytesIO(fh.read()), allow_pickle=False)
            if cached.ndim == 2 and cached.shape[1] == len(scheme.tiers):
                return np.asarray(cached, dtype=np.uint64)
        except (OSError, ValueError):
            log.warning("ignoring an unreadable fingerprint cache %s", key)
    keys = frame_keys(scheme, load_frame(svc.store, item), probes=False)
    table = np.column_stack([keys.keys(t) for t in range(len(scheme.tiers))])
    buffer = io.BytesIO()
    np.save(buffer, table, allow_pickle=False)
    svc.store.put_bytes(key, buffer.getvalue())
    return table


def record_accepted_fingerprints(svc: Services, item: VersionItem) -> None:
    """Cache an accepted version's fingerprints now (optional: they are built when needed)."""
    refs = model_benchmarks(svc, item.model_id)
    if refs:
        summary = benchmark_summary(svc, ensure_benchmark_fingerprints(svc, refs[0]))
        accepted_row_keys(svc, item, summary.scheme)


def accepted_keys(
    svc: Services, model_id: int, scheme: Scheme, *, exclude_job: str | None = None
) -> AcceptedKeys:

    tables = [
        accepted_row_keys(svc, item, scheme)
        for item in accepted_items(svc.db, model_id, exclude=(exclude_job,))
    ]
    tiers = len(scheme.tiers)
    if not tables:
        return AcceptedKeys(scheme, 0, [np.empty(0, dtype=np.uint64) for _ in range(tiers)])
    stacked = np.concatenate(tables)
    return AcceptedKeys(scheme, len(stacked), [np.unique(stacked[:, t]) for t in range(tiers)])


def known_mask(keys: RowKeys, accepted: AcceptedKeys, benchmark: FingerprintSummary) -> np.ndarray:
    """Rows matching accepted rows in a tier that is informative at the accepted data's size."""
    known = np.zeros(keys.rows, dtype=bool)
    if accepted.rows == 0 or keys.rows == 0:
        return known
    scale = accepted.rows / max(1, benchmark.rows)
    tiers = [
        t
        for t, summary in enumerate(benchmark.tiers)
        if min(1.0, summary.chance_rate * scale) <= KNOWN_CHANCE_MAX
    ]
    matched = match_rows(keys, accepted.tier_keys)
    for tier in tiers:
        known |= matched[tier]
    return known


@dataclass(frozen=True)
class NovelRows:
    """A contribution's rows without those already accepted for the model."""

    frame: pd.DataFrame
    known: int
    total: int

    @property
    def novel(self) -> int:
        return self.total - self.known

    @property
    def novel_share(self) -> float:
        return self.novel / self.total if self.total else 0.0


def novel_rows(
    svc: Services, model_id: int, frame: pd.DataFrame, *, exclude_job: str | None = None
) -> NovelRows:
    """`frame` without the rows that duplicate the model's accepted rows, and how many left.

    Accepted rows are read from the database at the call (`accepted_items`), the contribution
    `exclude_job` left out. Without a benchmark there is no scheme to compare rows in, and
    nothing is dropped.
    """
    refs = model_benchmarks(svc, model_id)
    if not refs or frame.empty:
        return NovelRows(frame, 0, len(frame))
    summary = benchmark_summary(svc, ensure_benchmark_fingerprints(svc, refs[0]))
    keys = frame_keys(summary.scheme, frame)
    accepted = accepted_keys(svc, model_id, summary.scheme, exclude_job=exclude_job)
    known = known_mask(keys, accepted, summary)
    return NovelRows(frame[~known].reset_index(drop=True), int(known.sum()), len(frame))


# --- one contribution ------------------------------------------------------------------------


@dataclass(frozen=True)
class IntegrityReport:
    """What the integrity check found for one contribution, and its verdict."""

    rows: int
    leakage: Leakage | None
    known_rows: int
    labels: LabelReport | None
    copy_rule: str
    min_novel_share: float
    label_check: str  # measured | not measured: why

    @property
    def novel_rows(self) -> int:
        return self.rows - self.known_rows

    @property
    def novel_share(self) -> float:
        return self.novel_rows / self.rows if self.rows else 0.0

    @property
    def leaked(self) -> bool:
        return self.leakage is not None and self.leakage.leaked

    @property
    def already_contributed(self) -> bool:
        return self.rows > 0 and self.novel_share < self.min_novel_share

    @property
    def quarantined(self) -> bool:
        return self.labels is not None and self.labels.quarantined

    @property
    def passed(self) -> bool:
        return not (self.leaked or self.already_contributed or self.quarantined)

    @property
    def verdict(self) -> str:
        if self.leaked:
            return "benchmark leakage"
        if self.already_contributed:
            return "already contributed"
        if self.quarantined:
            return "labels quarantined"
        return "passed"

    def reason(self) -> str | None:
        """Why the contribution is rejected (None when it passed); never quotes values."""
        if self.leaked:
            assert self.leakage is not None
            leak = self.leakage
            return (
                f"benchmark leakage: {leak.copies} of {leak.rows} rows copy or nearly copy rows "
                f"of the model's benchmark {leak.benchmark_version} ({self.copy_rule}; "
                f"{math.floor(leak.allowed)} allowed for chance and tolerance): nothing is paid "
                "and the rows are not used for training"
            )
        if self.already_contributed:
            return (
                f"already contributed: {self.known_rows} of {self.rows} rows duplicate rows "
                f"already accepted for this model ({self.novel_rows} new rows; at least "
                f"{self.min_novel_share:.0%} must be new)"
            )
        if self.quarantined:
            assert self.labels is not None
            return f"labels quarantined: {self.labels.summary()}"
        return None

    def figures(self) -> dict[str, Any]:
        """The job's `quality["integrity"]`."""
        leak = self.leakage
        labels = self.labels
        return {
            "verdict": self.verdict,
            "rows": self.rows,
            "benchmark_copies": leak.copies if leak else 0,
            "benchmark_copies_expected": round(leak.expected, 2) if leak else 0.0,
            "benchmark_copies_allowed": math.floor(leak.allowed) if leak else 0,
            "exact_benchmark_copies": leak.exact_copies if leak else 0,
            "copy_rule": leak.tier if leak else None,
            "benchmark_version": leak.benchmark_version if leak else None,
            "known_rows": self.known_rows,
            "novel_rows": self.novel_rows,
            "novel_share": round(self.novel_share, 4),
            "label_disagreement": round(labels.disagreement, 4) if labels else None,
            "reference_disagreement": round(labels.reference_disagreement, 4) if labels else None,
            "self_disagreement": (
                round(labels.self_disagreement, 4)
                if labels and labels.self_disagreement is not None
                else None
            ),
            "self_reference_disagreement": (
                round(labels.self_reference, 4)
                if labels and labels.self_reference is not None
                else None
            ),
            "label_reference": labels.reference if labels else None,
            "label_check": self.label_check,
        }


class ModelIntegrity:
    """What checking a model's contributions needs, read once per batch; use it with `with`.

    The benchmarks' fingerprint files stay open (downloaded once, on S3) until it closes.
    """

    def __init__(self, svc: Services, model_id: int) -> None:
        self.svc = svc
        self.model_id = model_id
        self._files = contextlib.ExitStack()
        self._opened: dict[str, Fingerprints] = {}
        self.task_type, self.estimator = _task_type(svc, model_id)
        self.benchmarks = model_benchmarks(svc, model_id)
        self.keys = {
            ref.version: ensure_benchmark_fingerprints(svc, ref) for ref in self.benchmarks
        }
        self._benchmark_reference: pd.DataFrame | None = None
        # A job being checked is `validating`, never accepted: the accepted data is the same
        # for every contribution of the batch, read once.
        self._accepted_keys: AcceptedKeys | None = None
        self._accepted_frame: pd.DataFrame | None = None
        self._accepted_read = False

    def __enter__(self) -> ModelIntegrity:
        return self

    def __exit__(self, *_: object) -> None:
        self._opened.clear()
        self._files.close()

    @property
    def has_benchmark(self) -> bool:
        return bool(self.benchmarks)

    def _fingerprints(self, ref: BenchmarkRef) -> Fingerprints:
        key = self.keys[ref.version]
        if key not in self._opened:
            self._opened[key] = self._files.enter_context(opened_fingerprints(self.svc, key))
        return self._opened[key]

    def inspect(self, frame: pd.DataFrame, *, job_id: str | None) -> IntegrityReport:
        settings = self.svc.settings
        rows = len(frame)
        worst: Leakage | None = None
        rule = ""
        latest: FingerprintSummary | None = None
        latest_keys: RowKeys | None = None
        for ref in self.benchmarks:
            fingerprints = self._fingerprints(ref)
            keys = frame_keys(fingerprints.scheme, frame)
            leak = count_benchmark_copies(
                keys,
                fingerprints,
                tolerance=settings.integrity_copy_tolerance,
                version=ref.version,
            )
            if latest is None:
                latest, latest_keys = fingerprints.summary, keys
            if worst is None or leak.copies - leak.allowed > worst.copies - worst.allowed:
                worst, rule = leak, copy_rule(leak.tier, fingerprints.scheme)
        known = 0
        novel = frame
        if latest is not None and latest_keys is not None:
            if self._accepted_keys is None:
                self._accepted_keys = accepted_keys(self.svc, self.model_id, latest.scheme)
            mask = known_mask(latest_keys, self._accepted_keys, latest)
            known = int(mask.sum())
            novel = frame[~mask].reset_index(drop=True)
        report = IntegrityReport(
            rows, worst, known, None, rule, settings.integrity_min_novel_share, "not measured"
        )
        if report.leaked or report.already_contributed or latest is None:
            return report
        labels, note = self._labels(novel, latest.scheme, job_id)
        return IntegrityReport(
            rows, worst, known, labels, rule, settings.integrity_min_novel_share, note
        )

    def _labels(
        self, novel: pd.DataFrame, scheme: Scheme, job_id: str | None
    ) -> tuple[LabelReport | None, str]:
        reference, name = self._reference(scheme, job_id)
        if reference is None:
            return None, "not measured: no reference data"
        report = check_labels(
            reference,
            novel,
            task_type=self.task_type,
            estimator=self.estimator,
            features=scheme.features,
            target=scheme.target,
            margin=self.svc.settings.label_disagreement_margin,
            reference_name=name,
        )
        if report is None:
            return None, "not measured: too few labelled rows or columns in common"
        return report, "quarantined" if report.quarantined else "passed"

    def _reference(self, scheme: Scheme, job_id: str | None) -> tuple[pd.DataFrame | None, str]:
        """Accepted rows when there are enough, else a sample of the newest benchmark."""
        if not self._accepted_read:
            frames = [
                load_frame(self.svc.store, item)
                for item in accepted_items(self.svc.db, self.model_id, exclude=(job_id,))
            ]
            self._accepted_frame = pd.concat(frames, ignore_index=True) if frames else None
            self._accepted_read = True
        accepted = self._accepted_frame
        if accepted is not None and (
            scheme.target in accepted.columns
            and int(accepted[scheme.target].notna().sum()) >= MIN_REFERENCE_ROWS
        ):
            return accepted, "accepted data"
        if self._benchmark_reference is None and self.benchmarks:
            self._benchmark_reference = benchmark_sample(
                self.svc, self.benchmarks[0], scheme.columns, LABEL_REFERENCE_ROWS
            )
        return self._benchmark_reference, "benchmark"


def benchmark_sample(
    svc: Services, ref: BenchmarkRef, columns: Sequence[str], size: int
) -> pd.DataFrame:
    """A seeded uniform sample of a benchmark's rows (`columns` only), read batch by batch."""
    with svc.store.local_path(ref.item.object_key) as path:
        source = file_batches(path, ref.item.file_format, columns)
        for _ in range(len(columns) + 2):
            rng = np.random.default_rng(0)
            kept: pa.Table | None = None
            priorities = np.empty(0)
            try:
                for batch in source():
                    table = pa.Table.from_batches([batch])
                    draws = rng.random(table.num_rows)
                    if kept is not None:
                        table = pa.concat_tables([kept, table.cast(kept.schema)])
                        draws = np.concatenate([priorities, draws])
                    if table.num_rows > size:
                        keep = np.sort(np.argpartition(draws, size)[:size])
                        table, draws = table.take(pa.array(keep)), draws[keep]
                    kept, priorities = table, draws
            except RetypeColumns:
                continue  # a CSV column turned out to be text: read again
            break
    if kept is None:
        return pd.DataFrame(columns=list(columns))
    return kept.to_pandas()


def integrity_error(exc: Exception) -> str:
    """A reason for an integrity check that could not read its own data."""
    if isinstance(exc, FingerprintFormatError):
        return "the benchmark's fingerprints are unreadable"
    return type(exc).__name__
