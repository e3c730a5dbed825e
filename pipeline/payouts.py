"""Payouts of improving contributions: the manifest that says who is paid, and ledger writes.

A contribution left `evaluating` with a positive improvement is paid: the reward formula of
`pipeline.rewards` gives its tokens, the manifest splits them between wallets, the ledger rows
are written and the job moves to `rewarded` with the reason. Payment is idempotent per
evaluation (ledger rows are unique per evaluation and wallet). The manifest is the one stored
with the version, else a `manifest.json` beside it in the store, else the submitter's stored
one; without a usable one the job is `rewarded` and nothing is paid. The reads of the ledger
are in `pipeline.ledger`.

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from pipeline.batches import EVALUATING, REWARDED, Services
from pipeline.db import Database
from pipeline.errors import InvalidInput
from pipeline.objectstore import ObjectStore, dataset_key
from pipeline.scoring import EvaluationOutcome
from pipeline.tables import (
    Contribution,
    ContributorProfile,
    DatasetVersion,
    Evaluation,
    RewardEntry,
    utcnow,
)

log = logging.getLogger(__name__)

MANIFEST_FILENAME = "manifest.json"
# Key of the marker `_read_manifest_object` returns for a manifest.json that cannot be used.
INVALID_MARK = "_invalid"


def _read_manifest_object(store: ObjectStore, key: str) -> dict[str, Any] | None:
    """A `manifest.json` object: its JSON object, or a marker saying why it is unusable."""
    from pipeline.rewards import InvalidManifest, read_manifest_file

    try:
        return read_manifest_file(store, key)
    except InvalidManifest as exc:
        return {INVALID_MARK: "; ".join(str(problem) for problem in exc.problems)}


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
