"""Reads of the reward ledger and the evaluation history, and contributors' stored manifests.

The ledger stores wallets in their EIP-55 spelling, so a wallet asked for in any case finds
its entries. Writes of the ledger happen in `pipeline.rewards.payouts.pay_evaluation` only.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import aliased

from pipeline.checks.disclosure import submitter_integrity
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput, NotFound
from pipeline.core.tables import (
    CONTRIBUTION_VERSION,
    EXTERNAL_VERSION,
    BenchmarkSpec,
    Contribution,
    ContributorProfile,
    DatasetVersion,
    Evaluation,
    Model,
    RewardEntry,
    isoformat_utc,
    utcnow,
)
from pipeline.evaluation.jobs import accepted_contribution
from pipeline.rewards.formula import to_checksum_address, validate_wallet
from pipeline.rewards.manifests import parse_manifest
from pipeline.rewards.stability import band_view

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}")
    return limit


def wallet_rewards(db: Database, wallet: str, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """A wallet's ledger entries, newest first, with the total over all its entries.

    `totalAmount` and each entry's `amount` are the exact amounts in base units (10**-18 token)
    as decimal strings; `totalTokens` and `tokens` are their floats, as before.
    """
    validate_wallet(wallet)
    check_limit(limit)
    canonical = to_checksum_address(wallet)
    with db.session() as session:
        total, count = session.execute(
            select(func.coalesce(func.sum(RewardEntry.tokens), 0.0), func.count()).where(
                RewardEntry.wallet_address == canonical
            )
        ).one()
        # Summed here: SQLite keeps the amounts as text, which its sum() would read as doubles.
        total_units = sum(
            session.scalars(
                select(RewardEntry.units).where(RewardEntry.wallet_address == canonical)
            )
        )
        rows = session.execute(
            select(RewardEntry, Evaluation, DatasetVersion.version, Contribution.quality)
            .join(Evaluation, RewardEntry.evaluation_id == Evaluation.id)
            .outerjoin(DatasetVersion, Evaluation.dataset_version_id == DatasetVersion.id)
            .outerjoin(Contribution, RewardEntry.contribution_id == Contribution.id)
            .where(RewardEntry.wallet_address == canonical)
            .order_by(RewardEntry.created_at.desc(), RewardEntry.id.desc())
            .limit(limit)
        ).all()
    return {
        "wallet": canonical,
        "totalTokens": round(float(total), 6),
        "totalAmount": str(total_units),
        "count": int(count),
        "entries": [
            {
                "id": entry.id,
                "modelId": entry.model_id,
                "jobId": entry.contribution_id,
                "evaluationId": entry.evaluation_id,
                "datasetVersion": version,
                "tokens": entry.tokens,
                "amount": str(entry.units),
                "metricName": evaluation.metric_name,
                "improvementPct": evaluation.improvement_pct,
                **valuation_fields(evaluation),
                **share_computation((quality or {}).get("valuation")),
                # Public by wallet: the submitter's coarse view (pipeline.checks.disclosure).
                "integrity": submitter_integrity((quality or {}).get("integrity")),
                "createdAt": isoformat_utc(entry.created_at),
            }
            for entry, evaluation, version, quality in rows
        ],
    }


def model_evaluations(db: Database, model_id: int, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """A model's metric history, newest first.

    `kind` is `contribution` when the evaluation measured a contribution (score with it,
    baseline without it) and `rescore` when it scored the model as it stands (score of the model
    trained on all accepted rows, baseline the trivial majority-class or mean predictor).
    `benchmarkSpecId` and `benchmarkVersion` name the yardstick used: the spec and the dataset
    version holding the benchmark rows (which are never served back).
    """
    check_limit(limit)
    benchmark_version = aliased(DatasetVersion)
    with db.session() as session:
        if session.get(Model, model_id) is None:
            raise NotFound(f"model {model_id} not found")
        rows = session.execute(
            select(
                Evaluation,
                DatasetVersion.version,
                DatasetVersion.kind,
                BenchmarkSpec.eval_split,
                benchmark_version.version,
            )
            .outerjoin(DatasetVersion, Evaluation.dataset_version_id == DatasetVersion.id)
            .join(BenchmarkSpec, Evaluation.benchmark_spec_id == BenchmarkSpec.id)
            .join(benchmark_version, BenchmarkSpec.dataset_version_id == benchmark_version.id)
            .where(Evaluation.model_id == model_id)
            .order_by(Evaluation.created_at.desc(), Evaluation.id)
            .limit(limit)
        ).all()
    return {
        "modelId": model_id,
        "evaluations": [
            {
                "id": evaluation.id,
                "kind": "contribution"
                if kind in (CONTRIBUTION_VERSION, EXTERNAL_VERSION)
                else "rescore",
                "trigger": evaluation.trigger,
                "datasetVersion": version,
                "benchmarkSpecId": evaluation.benchmark_spec_id,
                "benchmarkVersion": bench_version,
                "evalSplit": eval_split,
                "metricName": evaluation.metric_name,
                "metricDirection": evaluation.metric_direction,
                "score": _finite(evaluation.score),
                "baselineScore": _finite(evaluation.baseline_score),
                "improvementPct": _finite(evaluation.improvement_pct),
                **valuation_fields(evaluation),
                "runId": evaluation.run_id,
                "createdAt": isoformat_utc(evaluation.created_at),
            }
            for evaluation, version, kind, eval_split, bench_version in rows
        ],
    }


def valuation_fields(evaluation: Evaluation) -> dict[str, Any]:
    """Pool, share and interval of a contribution's evaluation (None on re-scores)."""
    interval = None
    if evaluation.interval_low is not None and evaluation.interval_high is not None:
        interval = {
            "low": evaluation.interval_low,
            "high": evaluation.interval_high,
            "level": evaluation.interval_level,
            "resamples": evaluation.resamples,
        }
    return {
        "valuationId": evaluation.valuation_id,
        "poolPct": _finite(evaluation.pool_pct),
        "sharePct": _finite(evaluation.improvement_pct) if evaluation.valuation_id else None,
        "interval": interval,
        "batchSize": evaluation.batch_size,
        "valuationMethod": evaluation.valuation_method,
        # Rows of the owner's base training data the model was trained on, with and without.
        "baseRows": evaluation.base_rows,
    }


def share_computation(valuation: dict[str, Any] | None) -> dict[str, Any]:
    """How a job's share was computed, from its `quality.valuation`: accepted rows the shares'
    game trained on, whether "without" came from the cache, the model's paired fits and the
    pool's band over them (None before these were kept; the band None with one fit)."""
    valuation = valuation or {}
    return {
        "sampleRows": valuation.get("sample_rows"),
        "withoutCache": valuation.get("without_cache"),
        "pairedFits": valuation.get("paired_fits"),
        "stabilityBand": band_view(valuation.get("stability")),
    }


def accepted_data(db: Database, model_id: int) -> dict[str, Any]:
    """Audit of a model's training data: every accepted dataset version, by whom, on what.

    Accepted versions are those `pipeline.evaluation.datasets.accepted_items` trains on
    (rewarded, or accepted with rewards pending), oldest first, each with its submitter, rows, the
    evaluation that accepted it (share, pool, interval) and the tokens paid.
    """

    with db.session() as session:
        if session.get(Model, model_id) is None:
            raise NotFound(f"model {model_id} not found")
        rows = session.execute(
            select(Contribution, DatasetVersion)
            .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
            .where(Contribution.model_id == model_id, accepted_contribution())
            .order_by(DatasetVersion.version_number)
        ).all()
        evaluations = {
            e.dataset_version_id: e
            for e in session.scalars(
                select(Evaluation)
                .where(
                    Evaluation.model_id == model_id,
                    Evaluation.dataset_version_id.in_([dv.id for _, dv in rows]),
                )
                .order_by(Evaluation.created_at)
            )
        }
    versions = []
    for job, dv in rows:
        evaluation = evaluations.get(dv.id)
        valuation = (job.quality or {}).get("valuation") or {}
        versions.append(
            {
                "datasetVersion": dv.version,
                "jobId": job.id,
                "submitter": job.submitter_id,
                "status": job.status,
                "rows": dv.row_count,
                "valuedRows": valuation.get("valued_rows"),
                "sha256": dv.sha256,
                "evaluationId": evaluation.id if evaluation else None,
                "acceptedAt": isoformat_utc(evaluation.created_at) if evaluation else None,
                "metricName": evaluation.metric_name if evaluation else None,
                **(valuation_fields(evaluation) if evaluation else {}),
                "tokens": job.tokens,
            }
        )
    return {
        "modelId": model_id,
        "versions": versions,
        "rows": sum(v["valuedRows"] or v["rows"] or 0 for v in versions),
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def get_profile(db: Database, user_id: str) -> dict[str, Any]:
    with db.session() as session:
        profile = session.get(ContributorProfile, user_id)
        if profile is None:
            raise NotFound("no contributor manifest stored; PUT /api/contributors/me stores one")
        return _profile_view(profile)


def put_profile(db: Database, user_id: str, manifest: Any) -> tuple[dict[str, Any], bool]:
    """Validate and store a user's manifest; returns (view, created)."""
    parse_manifest(manifest)
    with db.session() as session:
        profile = session.get(ContributorProfile, user_id)
        created = profile is None
        if profile is None:
            profile = ContributorProfile(user_id=user_id, manifest=manifest)
            session.add(profile)
        else:
            profile.manifest = manifest
            profile.updated_at = utcnow()
        session.flush()
        return _profile_view(profile), created


def _profile_view(profile: ContributorProfile) -> dict[str, Any]:
    return {
        "userId": profile.user_id,
        "manifest": profile.manifest,
        "updatedAt": isoformat_utc(profile.updated_at),
    }
