"""Settlement on chain (docs/settlement.md): epochs, their trees, a wallet's claim. All public.

- `GET /api/settlements` — every epoch, newest first.
- `GET /api/settlements/{epoch}` — root, totals, transactions, contracts, chain id.
- `GET /api/settlements/{epoch}/tree.json` — the whole tree (`standard-v1`, the format of
  `@openzeppelin/merkle-tree`), so a claim never depends on this service staying up.
- `GET /api/claims/{wallet}` — what to send to `claim(account, cumulative, proof)`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel

from api.deps import get_claimed_reader, get_db, get_store, request_settings
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.rewards.formula import WALLET_SCHEMA
from pipeline.settlement.claims import (
    ClaimedReader,
    get_settlement,
    list_settlements,
    settlement_tree,
    wallet_claim,
)
from pipeline.store.objectstore import ObjectStore

router = APIRouter(prefix="/api", tags=["settlement"])
Epoch = Path(..., max_length=40, pattern=r"^[A-Za-z0-9_.:-]+$")


class SettlementOut(BaseModel):
    epoch: str
    number: int
    status: str
    root: str
    wallets: int
    totalAmount: str  # noqa: N815 - base units, a decimal string
    mintedAmount: str | None  # noqa: N815
    ledgerRowId: int  # noqa: N815
    chainId: int  # noqa: N815
    token: str
    distributor: str
    mintTransaction: str | None  # noqa: N815
    rootTransaction: str | None  # noqa: N815
    block: int | None
    createdAt: str | None  # noqa: N815
    settledAt: str | None  # noqa: N815


class SettlementList(BaseModel):
    settlements: list[SettlementOut]


class ClaimOut(BaseModel):
    wallet: str
    epoch: str
    amount: str  # the cumulative amount the claim proves, base units
    claimedAmount: str | None  # noqa: N815
    proof: list[str]
    root: str
    chainId: int  # noqa: N815
    token: str
    distributor: str
    rpcUrl: str | None  # noqa: N815


@router.get("/settlements", response_model=SettlementList, summary="Epochs settled on chain")
def get_settlements(db: Database = Depends(get_db)) -> dict[str, Any]:
    return list_settlements(db)


@router.get(
    "/settlements/{epoch}",
    response_model=SettlementOut,
    summary="One epoch's settlement",
    responses={404: {"description": "no settlement of that epoch"}},
)
def get_one_settlement(epoch: str = Epoch, db: Database = Depends(get_db)) -> dict[str, Any]:
    return get_settlement(db, epoch)


@router.get(
    "/settlements/{epoch}/tree.json",
    summary="The epoch's whole Merkle tree (standard-v1 JSON)",
    responses={200: {"content": {"application/json": {}}}, 404: {"description": "no such epoch"}},
)
def get_settlement_tree(
    epoch: str = Epoch,
    db: Database = Depends(get_db),
    store: ObjectStore = Depends(get_store),
) -> Response:
    return Response(settlement_tree(db, store, epoch), media_type="application/json")


@router.get(
    "/claims/{wallet}",
    response_model=ClaimOut,
    summary="A wallet's claim: cumulative amount, proof, root, contracts",
    responses={
        400: {"description": "wallet is not 0x + 40 hex (EIP-55 when mixed case)"},
        404: {"description": "nothing to claim for this wallet"},
    },
)
def get_claim(
    wallet: str = Path(
        ..., max_length=100, json_schema_extra=lambda schema: schema.update(WALLET_SCHEMA)
    ),
    db: Database = Depends(get_db),
    store: ObjectStore = Depends(get_store),
    settings: Settings = Depends(request_settings),
    claimed: ClaimedReader = Depends(get_claimed_reader),
) -> dict[str, Any]:
    return wallet_claim(db, store, settings, wallet, claimed)
