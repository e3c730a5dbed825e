"""Integrity of contributions before valuation: benchmark leakage, known rows, label poisoning.

Run by the pipeline after the quality and PII checks, for each contribution still
`validating` (`pipeline.checks.batch.run_integrity_checks`):

1. Benchmark leakage. The contribution's rows are matched against each benchmark version's
   fingerprints (`pipeline.checks.benchmark_fingerprints`) in every tier of
   `pipeline.checks.fingerprints`; in a tier whose chance rate is p (the share of the
   benchmark's own rows matching another of its rows), an honest contribution of n rows is
   expected to match about n*p rows, and up to CHANCE_SLACK (1.5) times that when its
   distribution differs a little from the benchmark's. With q = min(1, 1.5*p), the contribution
   is rejected when, in some tier, more rows match than
   `n*q + 3*sqrt(n*q*(1-q)) + INTEGRITY_COPY_TOLERANCE * n` (default tolerance 1 %): a copy of
   benchmark rows, exact or with small noise, is never paid nor trained on, while the chance
   coincidences of low-cardinality rows are not taken for copies.
2. Known rows (`pipeline.checks.known_rows`): rows that match rows the model already trains on
   (accepted contributions and the owner's base training data), exactly or within a near tier's
   tolerance (a jittered or resampled copy), are counted and left out of valuation. A
   contribution whose novel rows are less than `INTEGRITY_MIN_NOVEL_SHARE` (default 5 %) of its
   rows is rejected as already contributed.
3. Labels (`pipeline.checks.labels`): the novel rows' labels are checked against the current model
   and against their own cross-validated predictions; far more disagreement than the reference
   data shows quarantines the contribution (`rejected`, the figures in the reason).

The figures go to the job's `quality["integrity"]`.

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pipeline.checks.benchmark_copies import (
    AnyLabel,
    Leakage,
    any_label_chance_rates,
    copy_rule,
    count_benchmark_copies,
)
from pipeline.checks.benchmark_fingerprints import (
    BenchmarkRef,
    benchmark_sample,
    ensure_benchmark_fingerprints,
    model_benchmarks,
    model_task,
    opened_fingerprints,
)
from pipeline.checks.disclosure import LEAKAGE_REASON
from pipeline.checks.fingerprint_files import (
    FingerprintFormatError,
    Fingerprints,
    FingerprintSummary,
)
from pipeline.checks.fingerprints import (
    RowKeys,
    Scheme,
    frame_keys,
    target_codes,
)
from pipeline.checks.known_rows import AcceptedKeys, accepted_keys, known_base_mask, known_mask
from pipeline.checks.labels import MIN_REFERENCE_ROWS, LabelReport, check_labels
from pipeline.evaluation.batches import load_frame
from pipeline.evaluation.datasets import accepted_items

if TYPE_CHECKING:
    from pipeline.services import Services

log = logging.getLogger(__name__)

# Rows of a benchmark read for the label check's reference (a seeded sample), and for the
# classes and chance rates of matching its rows whatever their label.
LABEL_REFERENCE_ROWS = 2_000
# Labels tried per row when matching whatever the label: the benchmark's most frequent classes.
MAX_CLASSES = 50


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
    known_base_rows: int = 0  # of `known_rows`, those in the owner's base training data

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
        """Why the contribution is rejected, as its submitter is told (None when it passed).

        Benchmark leakage gets the same words whatever the figures (`disclosure`); `detail()`
        has them for the model's owner and the operators.
        """
        if self.leaked:
            return LEAKAGE_REASON
        return self.detail()

    def detail(self) -> str | None:
        """Why the contribution is rejected, with the figures; never quotes values."""
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
            where = (
                f"the model already trains on ({self.known_base_rows} of them in the owner's "
                "base training data)"
                if self.known_base_rows
                else "already accepted for this model"
            )
            return (
                f"already contributed: {self.known_rows} of {self.rows} rows duplicate rows "
                f"{where} ({self.novel_rows} new rows; at least "
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
            "known_base_rows": self.known_base_rows,
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
            "detail": self.detail(),
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
        self.task_type, self.estimator = model_task(svc, model_id)
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
        # Per benchmark version: its classes and any-label chance rates (`_any_label`).
        self._classes: dict[str, tuple[np.ndarray, list[float]]] = {}

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
                any_label=self._any_label(ref, fingerprints, frame),
            )
            if latest is None:
                latest, latest_keys = fingerprints.summary, keys
            if worst is None or leak.copies - leak.allowed > worst.copies - worst.allowed:
                worst, rule = leak, copy_rule(leak.tier, fingerprints.scheme)
        known = known_base = 0
        novel = frame
        if latest is not None and latest_keys is not None:
            if self._accepted_keys is None:
                self._accepted_keys = accepted_keys(self.svc, self.model_id, latest.scheme)
            mask = known_mask(latest_keys, self._accepted_keys, latest)
            known = int(mask.sum())
            known_base = int(known_base_mask(latest_keys, self._accepted_keys, latest).sum())
            novel = frame[~mask].reset_index(drop=True)
        report = IntegrityReport(
            rows,
            worst,
            known,
            None,
            rule,
            settings.integrity_min_novel_share,
            "not measured",
            known_base,
        )
        if report.leaked or report.already_contributed or latest is None:
            return report
        labels, note = self._labels(novel, latest.scheme, job_id)
        return replace(report, labels=labels, label_check=note)

    def _any_label(
        self, ref: BenchmarkRef, fingerprints: Fingerprints, frame: pd.DataFrame
    ) -> AnyLabel | None:
        """For a classification benchmark, what matching rows whatever their label needs: its
        classes and chance rates, from a seeded sample of its rows (read once per batch)."""
        scheme = fingerprints.scheme
        if not scheme.classification:
            return None
        if ref.version not in self._classes:
            sample = benchmark_sample(self.svc, ref, scheme.columns, LABEL_REFERENCE_ROWS)
            codes, counts = np.unique(target_codes(scheme, sample), return_counts=True)
            labels = codes[np.argsort(-counts, kind="stable")][:MAX_CLASSES]
            self._classes[ref.version] = (
                labels,
                any_label_chance_rates(fingerprints, sample, labels),
            )
        labels, rates = self._classes[ref.version]
        return AnyLabel(target_codes(scheme, frame), labels, rates)

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


def integrity_error(exc: Exception) -> str:
    """A reason for an integrity check that could not read its own data."""
    if isinstance(exc, FingerprintFormatError):
        return "the benchmark's fingerprints are unreadable"
    return type(exc).__name__
