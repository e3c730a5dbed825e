"""Rewards, metric history and contributor manifests (spec §1, §2.5; reads of the pipeline).

- `GET /api/rewards?wallet=0x…&limit=` — a wallet's ledger entries, newest first (public: a
  wallet address is a public identifier, as on chain).
- `GET /api/models/{modelId}/evaluations?limit=` — the model's metric history, newest first.
- `GET`/`PUT /api/contributors/me` — the caller's stored contributor manifest (session auth),
  used to pay contributions that carry no manifest of their own.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query, Response
from pydantic import BaseModel

from api.deps import (
    JSON_ONLY_RESPONSES,
    ModelId,
    current_user,
    get_claimed_reader,
    get_db,
    get_store,
    json_write_request,
)
from pipeline.auth.sessions import Identity
from pipeline.core.db import Database
from pipeline.models.registry import get_model
from pipeline.rewards.formula import WALLET_SCHEMA
from pipeline.rewards.ledger import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    get_profile,
    model_evaluations,
    put_profile,
    wallet_rewards,
)
from pipeline.settlement.claims import ClaimedReader, wallet_settlement
from pipeline.store.objectstore import ObjectStore

router = APIRouter(prefix="/api", tags=["rewards"])


class IntervalOut(BaseModel):
    """Paired bootstrap interval of the batch's improvement, in percent."""

    low: float
    high: float
    level: float | None
    resamples: int | None


class StabilityBandOut(BaseModel):
    """The pool's band over the model's paired fits, in percent (pipeline.rewards.stability)."""

    low: float
    high: float
    fits: int


class ValuationFields(BaseModel):
    """How a contribution's evaluation was valued (docs/rewards.md); null on re-scores."""

    valuationId: str | None = None  # noqa: N815 - the API's camelCase field names
    poolPct: float | None = None  # noqa: N815
    sharePct: float | None = None  # noqa: N815
    interval: IntervalOut | None = None
    batchSize: int | None = None  # noqa: N815
    valuationMethod: str | None = None  # noqa: N815
    # Rows of the owner's base training data both models were trained on (docs/models.md).
    baseRows: int | None = None  # noqa: N815


class RewardEntryOut(ValuationFields):
    id: int
    modelId: int  # noqa: N815
    jobId: str | None  # noqa: N815
    evaluationId: str  # noqa: N815
    datasetVersion: str | None  # noqa: N815
    tokens: float
    # The exact amount in base units (10**-18 token), a decimal string (it exceeds 2**53).
    amount: str
    metricName: str  # noqa: N815
    improvementPct: float | None  # noqa: N815
    # How the share was computed: accepted rows the shares' game trained on, and whether the
    # model without the batch came from the cache ("hit") or was trained ("miss").
    sampleRows: int | None = None  # noqa: N815
    withoutCache: str | None = None  # noqa: N815
    # The model's paired fits and the pool's band over them, in percent (docs/rewards.md);
    # the band is null with one fit.
    pairedFits: int | None = None  # noqa: N815
    stabilityBand: StabilityBandOut | None = None  # noqa: N815
    integrity: dict[str, Any] | None = None
    createdAt: str  # noqa: N815


class WalletRewards(BaseModel):
    wallet: str
    totalTokens: float  # noqa: N815
    totalAmount: str  # noqa: N815 - base units, a decimal string
    # Settled by the last epoch on chain, claimed from the distributor, and the difference
    # (base units; claimed and claimable null while the chain does not answer).
    settledAmount: str  # noqa: N815
    claimedAmount: str | None  # noqa: N815
    claimableAmount: str | None  # noqa: N815
    count: int
    entries: list[RewardEntryOut]


class EvaluationOut(ValuationFields):
    id: str
    kind: str
    trigger: str
    datasetVersion: str | None  # noqa: N815
    benchmarkSpecId: str  # noqa: N815
    benchmarkVersion: str  # noqa: N815 - the benchmark's dataset version, e.g. "v3"
    evalSplit: str  # noqa: N815
    metricName: str  # noqa: N815
    metricDirection: str  # noqa: N815
    score: float | None
    baselineScore: float | None  # noqa: N815
    improvementPct: float | None  # noqa: N815
    runId: str | None  # noqa: N815
    createdAt: str  # noqa: N815


class EvaluationHistory(BaseModel):
    modelId: int  # noqa: N815
    evaluations: list[EvaluationOut]


class ContributorProfileOut(BaseModel):
    userId: str  # noqa: N815
    manifest: dict[str, Any]
    updatedAt: str  # noqa: N815


@router.get(
    "/rewards",
    response_model=WalletRewards,
    summary="Reward ledger of a wallet, newest first",
    responses={400: {"description": "wallet is not 0x + 40 hex (EIP-55 when mixed case)"}},
)
def get_rewards(
    wallet: str = Query(
        ..., max_length=100, json_schema_extra=lambda schema: schema.update(WALLET_SCHEMA)
    ),
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    db: Database = Depends(get_db),
    claimed: ClaimedReader = Depends(get_claimed_reader),
    store: ObjectStore = Depends(get_store),
) -> dict[str, Any]:
    return {**wallet_rewards(db, wallet, limit), **wallet_settlement(db, store, wallet, claimed)}


@router.get(
    "/models/{modelId}/evaluations",
    response_model=EvaluationHistory,
    summary="Metric history of a model, newest first",
    responses={404: {"description": "unknown model"}},
)
def get_evaluations(
    modelId: ModelId,  # noqa: N803 - the spec's path parameter name
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    db: Database = Depends(get_db),
) -> dict[str, Any]:
    with db.session() as session:
        get_model(session, modelId)
    return model_evaluations(db, modelId, limit)


@router.get(
    "/contributors/me",
    response_model=ContributorProfileOut,
    summary="The caller's stored contributor manifest",
    responses={401: {"description": "no session"}, 404: {"description": "none stored yet"}},
)
def get_my_manifest(
    user: Identity = Depends(current_user), db: Database = Depends(get_db)
) -> dict[str, Any]:
    return get_profile(db, user.user_id)


@router.put(
    "/contributors/me",
    response_model=ContributorProfileOut,
    summary="Store the caller's contributor manifest (spec §2.5)",
    responses={
        201: {"description": "stored for the first time", "model": ContributorProfileOut},
        400: {"description": "invalid manifest; detail names the field"},
        401: {"description": "no session"},
        **JSON_ONLY_RESPONSES,
    },
    dependencies=[Depends(json_write_request)],
    # The body is read as a plain object and checked by pipeline.rewards.manifests.parse_manifest,
    # whose detail names every problem; the document states the same rules.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ContributorManifest"}}
            },
        }
    },
)
def put_my_manifest(
    response: Response,
    manifest: dict[str, Any] = Body(..., description="contributor manifest (spec §2.5)"),
    user: Identity = Depends(current_user),
    db: Database = Depends(get_db),
) -> dict[str, Any]:
    view, created = put_profile(db, user.user_id, manifest)
    response.status_code = 201 if created else 200
    return view
