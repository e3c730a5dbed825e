"""recipes and base data: a model's whole recipe, and the base rows an evaluation trained on

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("recipe", sa.JSON(), nullable=True))
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("base_rows", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("base_rows")
    with op.batch_alter_table("models") as batch:
        batch.drop_column("recipe")
