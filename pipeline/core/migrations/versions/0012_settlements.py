"""settlements: one row per epoch settled on chain (ledger cut, tree, mint, root, transactions)

A new table; no existing row changes.

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    units: sa.types.TypeEngine[Any] = sa.String(78) if sqlite else sa.Numeric(78, 0)
    op.create_table(
        "settlements",
        sa.Column("epoch", sa.String(length=40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("ledger_row_id", sa.Integer(), nullable=False),
        sa.Column("root", sa.String(length=66), nullable=False),
        sa.Column("wallets", sa.Integer(), nullable=False),
        sa.Column("total_units", units, nullable=False),
        sa.Column("tree_key", sa.String(length=200), nullable=False),
        sa.Column("chain_id", sa.BigInteger(), nullable=False),
        sa.Column("token_address", sa.String(length=42), nullable=False),
        sa.Column("distributor_address", sa.String(length=42), nullable=False),
        sa.Column("minted_units", units, nullable=True),
        sa.Column("mint_tx_hash", sa.String(length=66), nullable=True),
        sa.Column("mint_raw", sa.Text(), nullable=True),
        sa.Column("root_tx_hash", sa.String(length=66), nullable=True),
        sa.Column("root_raw", sa.Text(), nullable=True),
        sa.Column("block", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("epoch", name=op.f("pk_settlements")),
        sa.UniqueConstraint("number", name=op.f("uq_settlements_number")),
    )


def downgrade() -> None:
    op.drop_table("settlements")
