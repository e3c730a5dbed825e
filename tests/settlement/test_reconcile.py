"""Reconciliation of the chain's mints and claims (events) with the settled ledger."""

from __future__ import annotations

from eth_account import Account

from pipeline.core.db import Database
from pipeline.settlement.epochs import SettlementTarget, settle_epoch
from pipeline.settlement.reconcile import reconcile
from pipeline.settlement.snapshot import load_tree
from pipeline.store.objectstore import LocalObjectStore
from tests.support.evm import Evm
from tests.support.ledger import LedgerWriter

TOKEN = 10**18


def test_settled_and_claimed_epochs_reconcile_and_a_stray_mint_does_not(
    db: Database, store: LocalObjectStore, evm: Evm
) -> None:
    wallet = Account.create().address
    LedgerWriter(db, store).pay([(wallet, 2 * TOKEN), (Account.create().address, TOKEN)])
    target = SettlementTarget(chain=evm.chain, owner=evm.owner, contracts=evm.contracts)
    view = settle_epoch(db, store, target, "2026-12-07")
    assert view is not None
    tree = load_tree(store, f"settlements/2026-12-07/{view['ledgerRowId']}/tree.json")
    index = [account for account, _ in tree.values].index(wallet)
    distributor = evm.chain.distributor(evm.contracts.distributor)
    proof = [bytes.fromhex(p[2:]) for p in tree.proof(index)]
    evm.chain.transact(evm.owner, distributor.functions.claim(wallet, 2 * TOKEN, proof))

    result = reconcile(db, evm.chain, evm.contracts)

    assert result.passed, result.problems
    assert (result.settled_total, result.minted, result.claimed) == (
        3 * TOKEN,
        3 * TOKEN,
        2 * TOKEN,
    )
    assert result.distributor_balance == TOKEN

    token = evm.chain.token(evm.contracts.token)
    evm.chain.transact(evm.owner, token.functions.mint(evm.owner.address, 5))
    result = reconcile(db, evm.chain, evm.contracts)
    assert not result.passed
    assert any("minted " in problem for problem in result.problems)
    assert any("other than the distributor" in problem for problem in result.problems)
