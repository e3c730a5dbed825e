"""SQLAlchemy tables of settlement on chain: one row per epoch (`pipeline.settlement.epochs`).

A separate module of `pipeline.core.tables`' schema (same `Base`, imported at its end), so the
ledger's module stays small.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.core.table_base import Base, utcnow
from pipeline.core.token_units import TokenUnits

# The steps of an epoch, in order; each is committed before the next starts.
SNAPSHOTTED = "snapshotted"  # ledger cut and tree fixed (tree stored in the object store)
MINTED = "minted"  # the difference minted to the distributor (or nothing to mint)
SETTLED = "settled"  # the root published and confirmed


class Settlement(Base):
    """One epoch's settlement: its ledger cut, tree, mint and root, and the transactions sent.

    A transaction is stored signed (`*_raw`, `*_tx_hash`) before it is sent, and only when none
    is stored yet (compare-and-set), so a resumed or concurrent settlement sends those same
    bytes: a second mint or root cannot exist.
    """

    __tablename__ = "settlements"

    epoch: Mapped[str] = mapped_column(String(40), primary_key=True)
    # The distributor's epoch number: 1, 2, 3… in the order epochs were snapshotted.
    number: Mapped[int] = mapped_column(Integer, unique=True)
    status: Mapped[str] = mapped_column(String(20))
    # The snapshot: cumulative amounts per wallet of the ledger rows with id <= this one.
    ledger_row_id: Mapped[int] = mapped_column(Integer)
    root: Mapped[str] = mapped_column(String(66))
    wallets: Mapped[int] = mapped_column(Integer)
    total_units: Mapped[int] = mapped_column(TokenUnits())
    tree_key: Mapped[str] = mapped_column(String(200))
    chain_id: Mapped[int] = mapped_column(BigInteger)
    token_address: Mapped[str] = mapped_column(String(42))
    distributor_address: Mapped[str] = mapped_column(String(42))
    minted_units: Mapped[int | None] = mapped_column(TokenUnits(), nullable=True)
    mint_tx_hash: Mapped[str | None] = mapped_column(String(66), nullable=True)
    mint_raw: Mapped[str | None] = mapped_column(Text, nullable=True)
    root_tx_hash: Mapped[str | None] = mapped_column(String(66), nullable=True)
    root_raw: Mapped[str | None] = mapped_column(Text, nullable=True)
    block: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    settled_at: Mapped[datetime | None] = mapped_column(nullable=True)


class VerifiedWallet(Base):
    """A wallet whose control a user proved by signing an EIP-4361 message
    (`pipeline.settlement.wallet_proof`); the latest proof wins."""

    __tablename__ = "verified_wallets"

    wallet_address: Mapped[str] = mapped_column(String(42), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(200))
    verified_at: Mapped[datetime] = mapped_column(default=utcnow)
