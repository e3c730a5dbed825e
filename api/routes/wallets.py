"""Wallets a supplier proved it controls (EIP-4361, docs/settlement.md#verified-wallets).

- `POST /api/wallet-proofs/challenge` (session) `{"wallet"}` — the message to sign.
- `POST /api/wallet-proofs/verify` (session) `{"message", "signature"}` — marks it verified.
- `GET /api/wallets/{wallet}` (public) — whether it is verified.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Path, Request

from api.deps import current_user, get_db, public_host, request_settings
from pipeline.auth.sessions import Identity
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.text import MULTILINE_TEXT, NO_CONTROL_CHARACTERS
from pipeline.rewards.formula import WALLET_SCHEMA
from pipeline.settlement.wallet_proof import challenge, verify, wallet_status

router = APIRouter(prefix="/api", tags=["settlement"])


@router.post(
    "/wallet-proofs/challenge",
    summary="An EIP-4361 message proving control of a wallet, to sign",
    responses={400: {"description": "invalid wallet"}, 401: {"description": "no session"}},
)
def post_challenge(
    request: Request,
    wallet: str = Body(
        ...,
        embed=True,
        max_length=100,
        json_schema_extra=lambda schema: schema.update(WALLET_SCHEMA),
    ),
    user: Identity = Depends(current_user),
    settings: Settings = Depends(request_settings),
) -> dict[str, Any]:
    return challenge(settings, user.user_id, wallet, public_host(request, settings))


@router.post(
    "/wallet-proofs/verify",
    summary="Record a wallet as verified from its signed challenge",
    responses={
        400: {"description": "not a challenge, or not a signature"},
        401: {"description": "no session"},
        422: {"description": "expired, issued to another user, or signed by another key"},
    },
)
def post_verify(
    # The patterns document what `verify` accepts (no NUL); it refuses the rest with a 400.
    message: str = Body(..., max_length=2000, json_schema_extra={"pattern": MULTILINE_TEXT}),
    signature: str = Body(
        ..., max_length=200, json_schema_extra={"pattern": NO_CONTROL_CHARACTERS}
    ),
    user: Identity = Depends(current_user),
    db: Database = Depends(get_db),
    settings: Settings = Depends(request_settings),
) -> dict[str, Any]:
    return verify(db, settings, user.user_id, message, signature)


@router.get("/wallets/{wallet}", summary="Whether a wallet is verified")
def get_wallet(
    wallet: str = Path(
        ..., max_length=100, json_schema_extra=lambda schema: schema.update(WALLET_SCHEMA)
    ),
    db: Database = Depends(get_db),
) -> dict[str, Any]:
    return wallet_status(db, wallet)
