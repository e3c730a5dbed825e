"""Proving control of a wallet: an EIP-4361 ("Sign-In with Ethereum") message signed with the
wallet's key (EIP-191 personal_sign), checked with eth-account.

The challenge is stateless: its nonce is an HMAC (the JWT secret) of the wallet, the user and
the time it was issued, so verifying it needs no stored challenge, and a message issued to one
user or for one wallet cannot serve another. It expires after `CHALLENGE_SECONDS`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import datetime, timedelta
from typing import Any

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.core.settlement_tables import VerifiedWallet
from pipeline.core.tables import isoformat_utc, utcnow
from pipeline.core.text import MULTILINE_TEXT, NO_CONTROL_CHARACTERS
from pipeline.rewards.formula import to_checksum_address, validate_wallet

CHALLENGE_SECONDS = 600
STATEMENT = "Prove control of this wallet to receive the marketplace's rewards."
_FIELD = re.compile(r"^(URI|Version|Chain ID|Nonce|Issued At|Expiration Time): (.+)$", re.M)
_HEADER = re.compile(
    r"^(\S+) wants you to sign in with your Ethereum account:\n(0x[0-9a-fA-F]{40})\n"
)


def _nonce(settings: Settings, wallet: str, user_id: str, issued_at: str) -> str:
    key = settings.jwt_key().encode()
    text = f"{wallet}|{user_id}|{issued_at}".encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()[:32]


def challenge(
    settings: Settings, user_id: str, wallet: str, domain: str, now: datetime | None = None
) -> dict[str, Any]:
    """The EIP-4361 message the wallet signs."""
    canonical = to_checksum_address(validate_wallet(wallet))
    now = now or utcnow()
    issued = isoformat_utc(now.replace(microsecond=0))
    expires = isoformat_utc(now.replace(microsecond=0) + timedelta(seconds=CHALLENGE_SECONDS))
    assert issued is not None and expires is not None
    message = (
        f"{domain} wants you to sign in with your Ethereum account:\n{canonical}\n\n"
        f"{STATEMENT}\n\nURI: https://{domain}/api/wallet-proofs/verify\nVersion: 1\n"
        f"Chain ID: {settings.settlement_chain_id or 1}\n"
        f"Nonce: {_nonce(settings, canonical, user_id, issued)}\n"
        f"Issued At: {issued}\nExpiration Time: {expires}"
    )
    return {"wallet": canonical, "message": message, "expiresAt": expires}


def verify(
    db: Database,
    settings: Settings,
    user_id: str,
    message: str,
    signature: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Check a signed challenge and record the wallet as verified for `user_id`."""
    if not re.match(MULTILINE_TEXT, message) or not re.match(NO_CONTROL_CHARACTERS, signature):
        raise InvalidInput("message or signature holds control characters")
    header = _HEADER.match(message)
    fields = dict(_FIELD.findall(message))
    if header is None or not {"Nonce", "Issued At", "Expiration Time"} <= fields.keys():
        raise InvalidInput("message is not a challenge of POST /api/wallet-proofs/challenge")
    wallet = to_checksum_address(header.group(2))
    expected = _nonce(settings, wallet, user_id, fields["Issued At"])
    if not hmac.compare_digest(expected, fields["Nonce"]):
        raise Unprocessable("the challenge was not issued to this user for this wallet")
    try:
        expires = datetime.fromisoformat(fields["Expiration Time"].replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput("the challenge's Expiration Time is not a time") from None
    if (now or utcnow()) >= expires:
        raise Unprocessable("the challenge expired: ask for a new one")
    from eth_account import Account  # about 0.3 s: not at the API's start
    from eth_account.messages import encode_defunct

    try:
        signer = Account.recover_message(encode_defunct(text=message), signature=signature)
    except Exception:  # malformed signatures raise several unrelated types
        raise InvalidInput("signature is not a 65-byte Ethereum signature") from None
    if signer != wallet:
        raise Unprocessable(f"the signature is not {wallet}'s")
    with db.session() as session:
        row = session.get(VerifiedWallet, wallet)
        if row is None:
            session.add(VerifiedWallet(wallet_address=wallet, user_id=user_id))
        else:
            row.user_id, row.verified_at = user_id, utcnow()
    return wallet_status(db, wallet)


def wallet_status(db: Database, wallet: str) -> dict[str, Any]:
    canonical = to_checksum_address(validate_wallet(wallet))
    with db.session() as session:
        row = session.get(VerifiedWallet, canonical)
    return {
        "wallet": canonical,
        "verified": row is not None,
        "verifiedAt": isoformat_utc(row.verified_at) if row is not None else None,
    }
