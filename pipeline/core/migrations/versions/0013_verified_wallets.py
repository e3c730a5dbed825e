"""verified_wallets: wallets whose control a user proved by an EIP-4361 signature

A new table; no existing row changes (every wallet starts unverified).

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "verified_wallets",
        sa.Column("wallet_address", sa.String(length=42), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("verified_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("wallet_address", name=op.f("pk_verified_wallets")),
    )


def downgrade() -> None:
    op.drop_table("verified_wallets")
