"""Settling epochs on a real EVM: snapshot, tree, mint, root; resumed after a kill; once."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from eth_account import Account

from pipeline.core.db import Database
from pipeline.settlement.epochs import SettlementTarget, settle_epoch
from pipeline.settlement.snapshot import load_tree
from pipeline.store.objectstore import LocalObjectStore
from tests.support.evm import Evm, on_chain
from tests.support.ledger import LedgerWriter

TOKEN = 10**18
WALLETS = [Account.create().address for _ in range(3)]
STEPS = ["tree_stored", "snapshot", "mint_signed", "minted", "root_signed", "root_sent"]


class Killed(BaseException):
    """The process dies here (a BaseException: nothing in the code under test catches it)."""


def _target(evm: Evm) -> SettlementTarget:
    return SettlementTarget(chain=evm.chain, owner=evm.owner, contracts=evm.contracts)


def _kill_at(step: str):  # type: ignore[no-untyped-def]
    def checkpoint(reached: str) -> None:
        if reached == step:
            raise Killed(step)

    return checkpoint


def test_an_epoch_mints_the_ledger_total_and_publishes_a_root_every_wallet_can_claim(
    db: Database, store: LocalObjectStore, evm: Evm
) -> None:
    ledger = LedgerWriter(db, store)
    ledger.pay([(WALLETS[0], 3 * TOKEN + 7), (WALLETS[1], 2**70)])
    ledger.pay([(WALLETS[0], 5)])

    view = settle_epoch(db, store, _target(evm), "2026-12-07")

    assert view is not None
    assert view["status"] == "settled" and view["number"] == 1 and view["wallets"] == 2
    assert view["totalAmount"] == str(3 * TOKEN + 12 + 2**70)
    chain = on_chain(evm.chain, evm.contracts)
    assert chain == {
        "supply": 3 * TOKEN + 12 + 2**70,
        "mints": 1,
        "roots": 1,
        "root": view["root"],
        "epoch": 1,
    }
    tree = load_tree(store, f"settlements/2026-12-07/{view['ledgerRowId']}/tree.json")
    assert tree.root == view["root"]
    index = [account for account, _ in tree.values].index(WALLETS[0])
    assert tree.values[index][1] == 3 * TOKEN + 12
    claimant = evm.funded_account()
    distributor = evm.chain.distributor(evm.contracts.distributor)
    proof = [bytes.fromhex(p[2:]) for p in tree.proof(index)]
    evm.chain.transact(claimant, distributor.functions.claim(WALLETS[0], 3 * TOKEN + 12, proof))
    token = evm.chain.token(evm.contracts.token)
    assert token.functions.balanceOf(WALLETS[0]).call() == 3 * TOKEN + 12


def test_rows_written_after_the_cut_go_into_the_next_epoch_which_mints_only_the_difference(
    db: Database, store: LocalObjectStore, evm: Evm
) -> None:
    ledger = LedgerWriter(db, store)
    ledger.pay([(WALLETS[0], TOKEN)])
    time.sleep(0.01)
    cut = datetime.now(UTC)
    time.sleep(0.01)
    ledger.pay([(WALLETS[1], 2 * TOKEN), (WALLETS[0], TOKEN)])

    first = settle_epoch(db, store, _target(evm), "2026-11-30", before=cut)
    second = settle_epoch(db, store, _target(evm), "2026-12-07")

    assert first is not None and second is not None
    assert (first["totalAmount"], first["mintedAmount"], first["wallets"]) == (
        str(TOKEN),
        str(TOKEN),
        1,
    )
    assert (second["totalAmount"], second["mintedAmount"]) == (str(4 * TOKEN), str(3 * TOKEN))
    assert second["number"] == 2
    assert on_chain(evm.chain, evm.contracts)["supply"] == 4 * TOKEN
    # Nothing new since: nothing to settle, nothing sent.
    assert settle_epoch(db, store, _target(evm), "2026-12-14") is None
    assert on_chain(evm.chain, evm.contracts)["roots"] == 2


@pytest.mark.parametrize("step", STEPS)
def test_a_settlement_killed_at_any_step_is_resumed_with_one_mint_and_one_root(
    db: Database, store: LocalObjectStore, evm: Evm, step: str
) -> None:
    LedgerWriter(db, store).pay([(WALLETS[0], 4 * TOKEN), (WALLETS[2], 1)])

    with pytest.raises(Killed):
        settle_epoch(db, store, _target(evm), "2026-12-07", checkpoint=_kill_at(step))
    view = settle_epoch(db, store, _target(evm), "2026-12-07")

    assert view is not None and view["status"] == "settled"
    assert on_chain(evm.chain, evm.contracts) == {
        "supply": 4 * TOKEN + 1,
        "mints": 1,
        "roots": 1,
        "root": view["root"],
        "epoch": 1,
    }


def test_an_earlier_epoch_killed_midway_is_finished_before_the_next_one(
    db: Database, store: LocalObjectStore, evm: Evm
) -> None:
    ledger = LedgerWriter(db, store)
    ledger.pay([(WALLETS[0], TOKEN)])
    with pytest.raises(Killed):
        settle_epoch(db, store, _target(evm), "2026-11-30", checkpoint=_kill_at("mint_signed"))
    ledger.pay([(WALLETS[1], TOKEN)])

    view = settle_epoch(db, store, _target(evm), "2026-12-07")

    assert view is not None and view["number"] == 2 and view["mintedAmount"] == str(TOKEN)
    chain = on_chain(evm.chain, evm.contracts)
    assert (chain["supply"], chain["mints"], chain["roots"], chain["epoch"]) == (
        2 * TOKEN,
        2,
        2,
        2,
    )


@pytest.mark.parametrize("step", ["tree_stored", "snapshot", "mint_signed", "root_signed"])
def test_two_settlements_of_one_epoch_at_once_settle_it_once(
    db: Database, store: LocalObjectStore, evm: Evm, step: str
) -> None:
    """The second settler runs whole while the first stands at `step`."""
    LedgerWriter(db, store).pay([(WALLETS[0], 6 * TOKEN)])
    views: list[dict[str, Any] | None] = []

    def second_settler(reached: str) -> None:
        if reached == step and not views:
            views.append(settle_epoch(db, store, _target(evm), "2026-12-07"))

    first = settle_epoch(db, store, _target(evm), "2026-12-07", checkpoint=second_settler)

    assert first is not None and views and views[0] is not None
    assert first["root"] == views[0]["root"] and first["status"] == "settled"
    chain = on_chain(evm.chain, evm.contracts)
    assert (chain["supply"], chain["mints"], chain["roots"]) == (6 * TOKEN, 1, 1)
