"""SETTLEMENT_REQUIRE_VERIFIED_WALLETS: an unverified wallet's amount waits in the ledger and
enters the first epoch after its proof, in full; nothing is lost, nothing is paid twice."""

from __future__ import annotations

import pytest
from eth_account import Account
from pydantic import SecretStr

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import NotFound
from pipeline.core.settlement_tables import VerifiedWallet
from pipeline.settlement.claims import wallet_claim, wallet_settlement
from pipeline.settlement.epochs import SettlementTarget, settle_epoch
from pipeline.settlement.target import settlement_target
from pipeline.store.objectstore import LocalObjectStore
from tests.support.evm import Evm
from tests.support.ledger import LedgerWriter

TOKEN = 10**18
VERIFIED, WAITING, EARLIER = (Account.create().address for _ in range(3))


def _target(evm: Evm, *, require: bool) -> SettlementTarget:
    return SettlementTarget(
        chain=evm.chain, owner=evm.owner, contracts=evm.contracts, require_verified_wallets=require
    )


def _verify(db: Database, wallet: str) -> None:
    with db.session() as session:
        session.add(VerifiedWallet(wallet_address=wallet, user_id="alice"))


def _settled(db: Database, store: LocalObjectStore, wallet: str) -> str:
    return str(wallet_settlement(db, store, wallet, lambda _d, _w: 0)["settledAmount"])


def test_an_unverified_wallet_waits_and_enters_the_first_epoch_after_its_proof(
    db: Database, store: LocalObjectStore, evm: Evm
) -> None:
    ledger = LedgerWriter(db, store)
    # Settled before the operator required verification: never taken back.
    ledger.pay([(EARLIER, TOKEN)])
    assert settle_epoch(db, store, _target(evm, require=False), "2026-11-23") is not None
    _verify(db, VERIFIED)
    ledger.pay([(VERIFIED, 2 * TOKEN), (WAITING, 3 * TOKEN), (EARLIER, 5 * TOKEN)])
    required = _target(evm, require=True)

    first = settle_epoch(db, store, required, "2026-11-30")

    assert first is not None
    assert (first["wallets"], first["totalAmount"]) == (2, str(3 * TOKEN))
    assert _settled(db, store, VERIFIED) == str(2 * TOKEN)
    assert _settled(db, store, WAITING) == "0"
    assert _settled(db, store, EARLIER) == str(TOKEN)  # its new 5 tokens wait too
    with pytest.raises(NotFound):
        wallet_claim(db, store, store_settings(evm), WAITING, lambda _d, _w: 0)
    # Still unverified, no new ledger row: nothing to settle, nothing sent.
    assert settle_epoch(db, store, required, "2026-12-07") is None

    _verify(db, WAITING)
    second = settle_epoch(db, store, required, "2026-12-07")

    # No new ledger row, yet the waiting amount enters now, in full, minted once.
    assert second is not None and second["ledgerRowId"] == first["ledgerRowId"]
    assert (second["totalAmount"], second["mintedAmount"]) == (str(6 * TOKEN), str(3 * TOKEN))
    claim = wallet_claim(db, store, store_settings(evm), WAITING, lambda _d, _w: 0)
    assert claim["amount"] == str(3 * TOKEN)
    distributor = evm.chain.distributor(evm.contracts.distributor)
    proof = [bytes.fromhex(p[2:]) for p in claim["proof"]]
    evm.chain.transact(evm.funded_account(), distributor.functions.claim(WAITING, 3 * TOKEN, proof))
    assert evm.chain.token(evm.contracts.token).functions.balanceOf(WAITING).call() == 3 * TOKEN


def test_the_setting_reaches_the_settlement_target(
    evm: Evm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pipeline.settlement.target.connect", lambda _settings: evm.chain)
    assert settlement_target(store_settings(evm, require=True)).require_verified_wallets
    assert not settlement_target(store_settings(evm)).require_verified_wallets


def store_settings(evm: Evm, *, require: bool = False) -> Settings:
    return Settings(
        settlement_rpc_url="http://127.0.0.1:1",
        settlement_chain_id=evm.chain.chain_id,
        settlement_token_address=evm.contracts.token,
        settlement_distributor_address=evm.contracts.distributor,
        settlement_owner_key=SecretStr(evm.owner.key.hex()),
        settlement_require_verified_wallets=require,
    )
