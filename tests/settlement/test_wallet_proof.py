"""Proving control of a wallet with an EIP-4361 message signed by its key (eth-account)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import utcnow
from pipeline.settlement.wallet_proof import challenge, verify

Headers = Callable[..., dict[str, str]]


def _sign(account: LocalAccount, message: str) -> str:
    return "0x" + bytes(account.sign_message(encode_defunct(text=message)).signature).hex()


def test_a_signed_challenge_verifies_the_wallet_for_its_user(
    client: Any, auth_headers: Headers
) -> None:
    account: LocalAccount = Account.create()
    headers = auth_headers("alice")
    assert client.get(f"/api/wallets/{account.address}").json()["verified"] is False

    issued = client.post(
        "/api/wallet-proofs/challenge", json={"wallet": account.address.lower()}, headers=headers
    ).json()
    assert issued["wallet"] == account.address
    assert issued["message"].startswith("testserver wants you to sign in with your Ethereum")
    assert f"\n{account.address}\n" in issued["message"]
    response = client.post(
        "/api/wallet-proofs/verify",
        json={"message": issued["message"], "signature": _sign(account, issued["message"])},
        headers=headers,
    )

    assert response.status_code == 200
    assert response.json()["verified"] is True
    status = client.get(f"/api/wallets/{account.address}").json()
    assert status["verified"] is True and status["verifiedAt"]


def test_another_key_another_user_or_an_expired_challenge_is_refused(
    settings: Settings, db: Database
) -> None:
    account: LocalAccount = Account.create()
    issued = challenge(settings, "alice", account.address, "market.example")
    message = issued["message"]

    other = _sign(Account.create(), message)
    for user, signature, now, problem in [
        ("alice", other, None, "not " + account.address),
        ("bob", _sign(account, message), None, "not issued to this user"),
        ("alice", _sign(account, message), utcnow() + timedelta(hours=1), "expired"),
    ]:
        try:
            verify(db, settings, user, message, signature, now=now)
        except Exception as exc:
            assert problem in str(exc), exc
        else:
            raise AssertionError(f"{problem}: accepted")
    tampered = message.replace(account.address, Account.create().address)
    try:
        verify(db, settings, "alice", tampered, _sign(account, tampered))
    except Exception as exc:
        assert "not issued" in str(exc)
    else:
        raise AssertionError("a challenge edited to another wallet was accepted")


def test_verify_needs_a_session_and_a_real_signature(client: Any, auth_headers: Headers) -> None:
    assert (
        client.post("/api/wallet-proofs/challenge", json={"wallet": "0x" + "1" * 40}).status_code
        == 401
    )
    response = client.post(
        "/api/wallet-proofs/verify",
        json={"message": "hello", "signature": "0x00"},
        headers=auth_headers("alice"),
    )
    assert response.status_code == 400
    # NUL in a message or a signature (the schema's patterns exclude it): 400, not a 500.
    account: LocalAccount = Account.create()
    issued = client.post(
        "/api/wallet-proofs/challenge",
        json={"wallet": account.address},
        headers=auth_headers("alice"),
    ).json()
    signature = _sign(account, issued["message"])
    for body in (
        {"message": issued["message"] + "\x00", "signature": signature},
        {"message": issued["message"], "signature": signature + "\x00"},
    ):
        refused = client.post("/api/wallet-proofs/verify", json=body, headers=auth_headers("alice"))
        assert refused.status_code == 400, refused.text
    bad_wallet = client.post(
        "/api/wallet-proofs/challenge", json={"wallet": "0x123"}, headers=auth_headers("alice")
    )
    assert bad_wallet.status_code == 400
