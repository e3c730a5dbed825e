"""paired fits: models.paired_fits, the fits of each training frame in a valuation

Existing models get 1: one fit on every row, the valuation they had (docs/models.md).

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("paired_fits", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite 3.35+): a batch would copy `models` to a new table and drop the
    # old one, which the foreign keys of a store with contributions refuse.
    op.drop_column("models", "paired_fits")
