"""The ledger as an epoch sees it: cumulative base units per wallet up to one ledger row.

Ledger rows are only ever added (`pipeline.rewards.payouts`), so the rows with an id up to a
cut are the same at every read: an epoch stores only its cut, and its snapshot, tree and root
are the same however often they are rebuilt. Amounts are summed in Python: SQLite keeps them as
text (`pipeline.core.token_units`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from pipeline.core.db import Database
from pipeline.core.settlement_tables import VerifiedWallet
from pipeline.core.tables import RewardEntry
from pipeline.settlement.merkle import StandardMerkleTree, load
from pipeline.store.objectstore import ObjectStore


@dataclass(frozen=True)
class LedgerSnapshot:
    ledger_row_id: int
    cumulative: dict[str, int]  # EIP-55 wallet -> base units, wallets in sorted order

    @property
    def total(self) -> int:
        return sum(self.cumulative.values())

    def tree(self) -> StandardMerkleTree:
        return StandardMerkleTree.of(list(self.cumulative.items()))


def ledger_cut(db: Database, before: datetime | None, at_least: int) -> int:
    """The newest ledger row written before `before` (any time when None), never below the
    previous epoch's cut: rows written later go into the next epoch."""
    query = select(func.max(RewardEntry.id))
    if before is not None:
        query = query.where(RewardEntry.created_at < before)
    with db.session() as session:
        newest = session.scalar(query)
    return max(int(newest or 0), at_least)


def take_snapshot(db: Database, ledger_row_id: int) -> LedgerSnapshot:
    totals: dict[str, int] = defaultdict(int)
    with db.session() as session:
        rows = session.execute(
            select(RewardEntry.wallet_address, RewardEntry.units).where(
                RewardEntry.id <= ledger_row_id
            )
        )
        for wallet, units in rows:
            totals[wallet] += units
    return LedgerSnapshot(
        ledger_row_id=ledger_row_id,
        cumulative={wallet: totals[wallet] for wallet in sorted(totals) if totals[wallet] > 0},
    )


def held_until_verified(
    db: Database, snapshot: LedgerSnapshot, earlier: StandardMerkleTree | None
) -> LedgerSnapshot:
    """The snapshot with each wallet not proven by signature (EIP-4361) held at what an earlier
    epoch settled it (nothing, for most): its new amount stays in the ledger and enters the
    first epoch after its verification, in full, since the tree's amounts are cumulative."""
    with db.session() as session:
        verified = set(session.scalars(select(VerifiedWallet.wallet_address)))
    settled = dict(earlier.values) if earlier is not None else {}
    cumulative = {
        wallet: amount if wallet in verified else int(settled.get(wallet, 0))
        for wallet, amount in snapshot.cumulative.items()
    }
    return LedgerSnapshot(
        ledger_row_id=snapshot.ledger_row_id,
        cumulative={wallet: amount for wallet, amount in cumulative.items() if amount > 0},
    )


def wallet_cumulative(db: Database, wallet: str, ledger_row_id: int) -> int:
    """One wallet's cumulative base units up to a cut (its settled amount at that epoch)."""
    with db.session() as session:
        return sum(
            session.scalars(
                select(RewardEntry.units).where(
                    RewardEntry.wallet_address == wallet, RewardEntry.id <= ledger_row_id
                )
            )
        )


def tree_key(epoch: str) -> str:
    return f"settlements/{epoch}/tree.json"


def store_tree(store: ObjectStore, epoch: str, tree: StandardMerkleTree) -> str:
    """The whole tree (`standard-v1` JSON) in the object store, so claims never need us."""
    key = tree_key(epoch)
    store.put_bytes(key, tree.dump_json())
    return key


def load_tree(store: ObjectStore, key: str) -> StandardMerkleTree:
    with store.open(key) as fh:
        return load(json.load(fh))
