"""Reads of settlement for wallets and the API: epochs, their trees, a wallet's claim.

A wallet's settled amount is its amount in the last settled epoch's tree (its cumulative ledger
amount up to the epoch's cut, unless held back until the wallet is verified);
what it claimed is read from the distributor (`claimed(account)`) when the chain answers, so the
rest of these reads work while it is down (claimed and claimable are then null).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import NotFound
from pipeline.core.settlement_tables import SETTLED, Settlement
from pipeline.rewards.formula import to_checksum_address, validate_wallet
from pipeline.settlement.merkle import StandardMerkleTree, from_dump
from pipeline.settlement.views import settlement_view
from pipeline.store.objectstore import ObjectStore

# (distributor, wallet) -> what the wallet claimed so far; None when the chain does not answer.
ClaimedReader = Callable[[str, str], int | None]
_TREES_KEPT = 4
_trees: OrderedDict[tuple[str, str], StandardMerkleTree] = OrderedDict()
_trees_lock = threading.Lock()


def chain_claimed_reader(settings: Settings) -> ClaimedReader:
    """Reads `claimed(account)` over SETTLEMENT_RPC_URL, with a short timeout."""

    def read(distributor: str, wallet: str) -> int | None:
        if settings.settlement_rpc_url is None:
            return None
        from pipeline.settlement.chain import Chain

        try:
            chain = Chain.over_http(settings.settlement_rpc_url, timeout_seconds=3.0)
            return int(chain.distributor(distributor).functions.claimed(wallet).call())
        except Exception:  # a chain that is down must not fail the read
            return None

    return read


def list_settlements(db: Database) -> dict[str, Any]:
    with db.session() as session:
        rows = session.scalars(select(Settlement).order_by(Settlement.number.desc())).all()
    return {"settlements": [settlement_view(row) for row in rows]}


def get_settlement(db: Database, epoch: str) -> dict[str, Any]:
    return settlement_view(_settlement(db, epoch))


def settlement_tree(db: Database, store: ObjectStore, epoch: str) -> bytes:
    """The epoch's whole tree, `standard-v1` JSON, as stored."""
    row = _settlement(db, epoch)
    with store.open(row.tree_key) as fh:
        return fh.read()


def _settlement(db: Database, epoch: str) -> Settlement:
    with db.session() as session:
        row = session.get(Settlement, epoch)
    if row is None:
        raise NotFound(f"no settlement of epoch {epoch!r}")
    return row


def last_settled(db: Database) -> Settlement | None:
    with db.session() as session:
        return session.scalars(
            select(Settlement)
            .where(Settlement.status == SETTLED)
            .order_by(Settlement.number.desc())
            .limit(1)
        ).first()


def wallet_settlement(
    db: Database, store: ObjectStore, wallet: str, claimed: ClaimedReader
) -> dict[str, Any]:
    """`settled`, `claimed` and `claimable` base units of a wallet (decimal strings)."""
    canonical = to_checksum_address(validate_wallet(wallet))
    row = last_settled(db)
    if row is None:
        return {"settledAmount": "0", "claimedAmount": "0", "claimableAmount": "0"}
    settled = settled_amount(store, row, canonical)
    done = claimed(row.distributor_address, canonical) if settled else 0
    return {
        "settledAmount": str(settled),
        "claimedAmount": None if done is None else str(done),
        "claimableAmount": None if done is None else str(max(settled - done, 0)),
    }


def wallet_claim(
    db: Database, store: ObjectStore, settings: Settings, wallet: str, claimed: ClaimedReader
) -> dict[str, Any]:
    """What a wallet sends to `claim(account, cumulative, proof)`; NotFound when nothing."""
    canonical = to_checksum_address(validate_wallet(wallet))
    row = last_settled(db)
    settled = 0 if row is None else settled_amount(store, row, canonical)
    if row is None or settled == 0:
        raise NotFound(f"nothing to claim for {canonical}: no settled epoch includes it")
    done = claimed(row.distributor_address, canonical)
    if done is not None and done >= settled:
        raise NotFound(f"nothing to claim for {canonical}: all {settled} units are claimed")
    tree = _tree(store, row)
    index = next(i for i, (account, _) in enumerate(tree.values) if account == canonical)
    return {
        "wallet": canonical,
        "epoch": row.epoch,
        "amount": str(settled),
        "claimedAmount": None if done is None else str(done),
        "proof": tree.proof(index),
        "root": row.root,
        "chainId": row.chain_id,
        "token": row.token_address,
        "distributor": row.distributor_address,
        "rpcUrl": settings.settlement_public_rpc_url or settings.settlement_rpc_url,
    }


def settled_amount(store: ObjectStore, row: Settlement, wallet: str) -> int:
    """A wallet's cumulative amount in an epoch's tree: its ledger amount up to the epoch's
    cut, or less while SETTLEMENT_REQUIRE_VERIFIED_WALLETS holds it back (0 when absent)."""
    return next((amount for account, amount in _tree(store, row).values if account == wallet), 0)


def _tree(store: ObjectStore, row: Settlement) -> StandardMerkleTree:
    key = (row.tree_key, row.root)
    with _trees_lock:
        tree = _trees.get(key)
        if tree is not None:
            _trees.move_to_end(key)
            return tree
    with store.open(row.tree_key) as fh:
        tree = from_dump(json.load(fh), row.root)
    with _trees_lock:
        _trees[key] = tree
        while len(_trees) > _TREES_KEPT:
            _trees.popitem(last=False)
    return tree
