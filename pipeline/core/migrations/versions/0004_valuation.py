"""valuation: batch pool, Shapley share and bootstrap interval on evaluations

Revision ID: 0004
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("valuation_id", sa.String(length=36)),
    ("pool_pct", sa.Float()),
    ("interval_low", sa.Float()),
    ("interval_high", sa.Float()),
    ("interval_level", sa.Float()),
    ("resamples", sa.Integer()),
    ("batch_size", sa.Integer()),
    ("batch_rows", sa.Integer()),
    ("valuation_method", sa.String(length=20)),
)


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        for name, type_ in COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
        batch.create_index(batch.f("ix_evaluations_valuation_id"), ["valuation_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_index(batch.f("ix_evaluations_valuation_id"))
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
