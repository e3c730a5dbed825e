"""payout holds: a valuation by the owner's code that its reference check disputes waits for the
operator

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("contributions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("payout_hold", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("contributions", schema=None) as batch_op:
        batch_op.drop_column("payout_hold")
