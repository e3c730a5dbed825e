"""Settling an epoch: snapshot the ledger, store the tree, mint the difference, publish the root.

Each step is committed before the next, so a process killed anywhere is resumed by the next
call for the epoch (or for any later epoch: an unsettled earlier epoch is finished first):

1. **snapshot**: the ledger cut, root, wallets and total go into a `settlements` row; the whole
   tree is stored first, under a key naming its cut. Two settlers of one epoch insert one row
   (primary key); the loser carries on with the winner's row.
2. **mint**: the distributor must hold the epoch's total minus what was minted before (the
   token's `totalSupply`: only settlement mints, and only to the distributor). The signed mint is
   stored (only if none is, compare-and-set) before it is sent; a resumed or concurrent settler
   sends those same bytes, whose nonce can be spent once.
3. **root**: `setRoot(number, root)`, stored signed the same way, sent, confirmed. The contract
   also refuses a second root for an epoch number.

A chain that is down or a transaction that reverts raises `ChainError`; nothing is lost, and
the next call resumes from the last committed step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eth_account.signers.local import LocalAccount
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.core.db import Database
from pipeline.core.errors import Conflict
from pipeline.core.settlement_tables import MINTED, SETTLED, SNAPSHOTTED, Settlement
from pipeline.core.tables import utcnow
from pipeline.settlement.chain import Chain, ChainError, RewardContracts, SignedCall
from pipeline.settlement.snapshot import (
    held_until_verified,
    ledger_cut,
    load_tree,
    store_tree,
    take_snapshot,
)
from pipeline.settlement.views import settlement_view
from pipeline.store.objectstore import ObjectStore

Checkpoint = Callable[[str], None]


@dataclass(frozen=True)
class SettlementTarget:
    """Where epochs settle: the chain, the owner's key (never stored) and the contracts."""

    chain: Chain
    owner: LocalAccount
    contracts: RewardContracts
    # SETTLEMENT_REQUIRE_VERIFIED_WALLETS: an unverified wallet's new amount waits.
    require_verified_wallets: bool = False


def _no_checkpoint(_: str) -> None:
    return None


def settle_epoch(
    db: Database,
    store: ObjectStore,
    target: SettlementTarget,
    epoch: str,
    before: datetime | None = None,
    checkpoint: Checkpoint = _no_checkpoint,
) -> dict[str, Any] | None:
    """Settle `epoch` (ledger rows written before `before`); None when there is nothing new.

    `checkpoint(step)` is called after each step (`tree_stored`, `snapshot`, `mint_signed`,
    `minted`, `root_signed`, `root_sent`): tests stop the process there, or run a second
    settler there.
    """
    try:
        for earlier in _unsettled(db, other_than=epoch):
            _finish(db, target, earlier, checkpoint)
        row = _snapshot(db, store, target, epoch, before, checkpoint)
        if row is None:
            return None
        checkpoint("snapshot")
        return settlement_view(_finish(db, target, row, checkpoint))
    except OSError as exc:  # requests' errors: the node is down or the connection dropped
        raise ChainError(f"the chain did not answer: {type(exc).__name__}") from exc


def _unsettled(db: Database, other_than: str) -> list[Settlement]:
    with db.session() as session:
        return list(
            session.scalars(
                select(Settlement)
                .where(Settlement.status != SETTLED, Settlement.epoch != other_than)
                .order_by(Settlement.number)
            )
        )


def _get(db: Database, epoch: str) -> Settlement | None:
    with db.session() as session:
        return session.get(Settlement, epoch)


def _snapshot(
    db: Database,
    store: ObjectStore,
    target: SettlementTarget,
    epoch: str,
    before: datetime | None,
    checkpoint: Checkpoint,
) -> Settlement | None:
    existing = _get(db, epoch)
    if existing is not None:
        return existing
    with db.session() as session:
        previous = session.scalars(
            select(Settlement).order_by(Settlement.number.desc()).limit(1)
        ).first()
        number = int(session.scalar(select(func.coalesce(func.max(Settlement.number), 0))) or 0)
    floor = previous.ledger_row_id if previous is not None else 0
    cut = ledger_cut(db, before, at_least=floor)
    if cut == floor and not target.require_verified_wallets:
        return None  # no ledger row since the last epoch: nothing to settle
    snapshot = take_snapshot(db, cut)
    if target.require_verified_wallets:
        earlier = load_tree(store, previous.tree_key) if previous is not None else None
        snapshot = held_until_verified(db, snapshot, earlier)
    if not snapshot.cumulative or (previous is not None and snapshot.tree().root == previous.root):
        return None  # nothing new to settle (or only amounts waiting for verification)
    tree = snapshot.tree()
    key = store_tree(store, f"{epoch}/{cut}", tree)
    row = Settlement(
        epoch=epoch,
        number=number + 1,
        status=SNAPSHOTTED,
        ledger_row_id=cut,
        root=tree.root,
        wallets=len(snapshot.cumulative),
        total_units=snapshot.total,
        tree_key=key,
        chain_id=target.chain.chain_id,
        token_address=target.contracts.token,
        distributor_address=target.contracts.distributor,
    )
    checkpoint("tree_stored")
    try:
        with db.session() as session:
            session.add(row)
    except IntegrityError:
        pass  # a concurrent settler snapshotted first: carry on with its row
    stored = _get(db, epoch)
    if stored is None:
        raise Conflict(f"another epoch took settlement number {number + 1}; settle again")
    return stored


def _finish(
    db: Database, target: SettlementTarget, row: Settlement, checkpoint: Checkpoint
) -> Settlement:
    if row.status == SNAPSHOTTED:
        row = _mint(db, target, row, checkpoint)
        checkpoint("minted")
    if row.status == MINTED:
        row = _publish(db, target, row, checkpoint)
    return row


def _mint(
    db: Database, target: SettlementTarget, row: Settlement, checkpoint: Checkpoint
) -> Settlement:
    chain = target.chain
    if row.mint_tx_hash is None:
        token = chain.token(row.token_address)
        need = row.total_units - int(token.functions.totalSupply().call())
        if need <= 0:
            return _advance(db, row.epoch, SNAPSHOTTED, MINTED, minted_units=0)
        signed = chain.sign(target.owner, token.functions.mint(row.distributor_address, need))
        row = _store_signed(db, row.epoch, "mint", signed, minted_units=need)
        checkpoint("mint_signed")
    assert row.mint_tx_hash is not None and row.mint_raw is not None
    signed = SignedCall(tx_hash=row.mint_tx_hash, raw=row.mint_raw, nonce=-1)
    chain.broadcast(signed)
    chain.confirm(signed)
    return _advance(db, row.epoch, SNAPSHOTTED, MINTED)


def _publish(
    db: Database, target: SettlementTarget, row: Settlement, checkpoint: Checkpoint
) -> Settlement:
    chain = target.chain
    if row.root_tx_hash is None:
        distributor = chain.distributor(row.distributor_address)
        call = distributor.functions.setRoot(row.number, bytes.fromhex(row.root[2:]))
        row = _store_signed(db, row.epoch, "root", chain.sign(target.owner, call))
        checkpoint("root_signed")
    assert row.root_tx_hash is not None and row.root_raw is not None
    signed = SignedCall(tx_hash=row.root_tx_hash, raw=row.root_raw, nonce=-1)
    chain.broadcast(signed)
    checkpoint("root_sent")
    receipt = chain.confirm(signed)
    return _advance(db, row.epoch, MINTED, SETTLED, block=receipt.block, settled_at=utcnow())


def _store_signed(
    db: Database, epoch: str, kind: str, signed: SignedCall, **values: Any
) -> Settlement:
    """Store a signed transaction unless one is stored already; the stored one wins."""
    hash_column = getattr(Settlement, f"{kind}_tx_hash")
    with db.session() as session:
        session.execute(
            update(Settlement)
            .where(Settlement.epoch == epoch, hash_column.is_(None))
            .values({f"{kind}_tx_hash": signed.tx_hash, f"{kind}_raw": signed.raw, **values})
        )
    stored = _get(db, epoch)
    assert stored is not None
    return stored


def _advance(db: Database, epoch: str, from_status: str, to: str, **values: Any) -> Settlement:
    with db.session() as session:
        session.execute(
            update(Settlement)
            .where(Settlement.epoch == epoch, Settlement.status == from_status)
            .values(status=to, **values)
        )
    stored = _get(db, epoch)
    assert stored is not None
    return stored
