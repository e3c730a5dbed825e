"""Where a dataset version stands, and which checks decided it: what a later run reports of it.

A run that re-materializes a version it did not process (it was settled in an earlier run, or
another run's batch took it) must not judge it again: it reports the decision that was made. A
version's checks run in order (`STAGES`): reading, quality, PII, the three integrity checks
(one step), then the valuation. A rejected or failed job's reason says which stage decided
(`pipeline.checks.batch`, `pipeline.rewards.batch_valuation` write them); the stages before it
passed, the ones after it never ran. An accepted or rewarded job passed them all; a queued job,
or one a run holds, has no decision yet.

This module knows nothing of Dagster; `assets/` maps the stages to its checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select

from pipeline.core.db import Database
from pipeline.core.tables import (
    BENCHMARK_VERSION,
    EVALUATING,
    FAILED,
    QUEUED,
    REJECTED,
    REWARDED,
    VALIDATING,
    Contribution,
    DatasetVersion,
    Evaluation,
)
from pipeline.intake.catalog import VersionFacts, version_facts

READING = "reading"
QUALITY = "quality"
PII = "pii"
BENCHMARK_COPIES = "benchmark_copies"
KNOWN_ROWS = "known_rows"
LABELS = "labels"
EVALUATION = "evaluation"
STAGES = (READING, QUALITY, PII, BENCHMARK_COPIES, KNOWN_ROWS, LABELS, EVALUATION)
INTEGRITY = (BENCHMARK_COPIES, KNOWN_ROWS, LABELS)  # judged together, in one step

# The start of a rejected or failed job's reason, and the stages that failed it.
_DECIDED_BY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("unreadable dataset", (READING,)),
    ("unexpected error during reading the dataset", (READING,)),
    ("quality checks failed", (QUALITY,)),
    ("unexpected error during quality checks", (QUALITY,)),
    ("PII scan failed", (PII,)),
    ("unexpected error during the PII scan", (PII,)),
    ("benchmark leakage", (BENCHMARK_COPIES,)),
    ("already contributed", (KNOWN_ROWS,)),
    ("labels quarantined", (LABELS,)),
    ("unexpected error during the integrity checks", INTEGRITY),
)
# A job given back or failed because the run holding it died: no check decided it.
_NO_DECISION = "the run holding it"


def decisions(facts: VersionFacts, scored: bool) -> dict[str, bool]:
    """Each stage that decided on the version: True passed, False failed (module docstring).

    `scored`: an evaluation of the version is recorded (a benchmark's re-score).
    """
    if facts.kind == BENCHMARK_VERSION:
        return {READING: True, EVALUATION: True} if scored else {}
    if facts.status in (REWARDED, EVALUATING) and scored:
        return dict.fromkeys(STAGES, True)
    if facts.status not in (REJECTED, FAILED):
        return {}
    reason = facts.reason or ""
    if reason.startswith(_NO_DECISION):
        return {}
    failed = next((s for prefix, s in _DECIDED_BY if reason.startswith(prefix)), (EVALUATION,))
    first = min(STAGES.index(stage) for stage in failed)
    decided = {stage: True for stage in STAGES[:first]}
    if set(failed) <= set(INTEGRITY):
        decided.update(dict.fromkeys(INTEGRITY, True))
    decided.update(dict.fromkeys(failed, False))
    return decided


@dataclass(frozen=True)
class VersionStanding:
    """A version as earlier runs left it: its facts, decisions, and the run that decided."""

    facts: VersionFacts
    decisions: dict[str, bool] = field(default_factory=dict)
    decided_in_run: str | None = None  # the run that checked (and valued) it
    evaluation: Evaluation | None = None  # its latest recorded evaluation

    @property
    def version(self) -> str:
        return self.facts.version

    def summary(self) -> str:
        """One line, e.g. `v3 was valued in run 1f2e… (rewarded, 9.58 tokens)`."""
        f, run = self.facts, self.decided_in_run or "an earlier run"
        if f.kind == BENCHMARK_VERSION:
            if self.evaluation is None:
                return f"benchmark {f.version} is not scored yet"
            return f"benchmark {f.version} scored the model in run {self.evaluation.run_id}"
        if f.status == REWARDED:
            return f"{f.version} was valued in run {run} (rewarded, {f.tokens or 0:g} tokens)"
        if f.status == EVALUATING and self.evaluation is not None:
            return f"{f.version} was valued in run {run} (accepted; rewards pending)"
        if f.status in (REJECTED, FAILED):
            return f"{f.version} was {f.status} in run {run}: {f.reason or ''}"
        if f.status in (VALIDATING, EVALUATING):
            return f"{f.version} is held by run {run} ({f.status})"
        if f.status == QUEUED:
            return f"{f.version} is queued: {f.reason or 'its checks have not run yet'}"
        return f"{f.version} is {f.status or 'stored'}"


def version_standing(db: Database, model_id: int, version: str) -> VersionStanding | None:
    """Where `version` stands; None when the model has no such stored version."""
    facts = version_facts(db, model_id, [version]).get(version)
    if facts is None:
        return None
    with db.session() as session:
        dv_id = session.scalar(
            select(DatasetVersion.id).where(
                DatasetVersion.model_id == model_id, DatasetVersion.version == version
            )
        )
        claimed_by = session.scalar(
            select(Contribution.claimed_by).where(Contribution.dataset_version_id == dv_id)
        )
        evaluation = session.scalar(
            select(Evaluation)
            .where(Evaluation.dataset_version_id == dv_id)
            .order_by(Evaluation.created_at.desc())
            .limit(1)
        )
    run = claimed_by or (evaluation.run_id if evaluation is not None else None)
    return VersionStanding(facts, decisions(facts, evaluation is not None), run, evaluation)
