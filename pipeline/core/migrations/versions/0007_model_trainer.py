"""model trainer: the owner's training code (entry point, folder hash, last failure)

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.alter_column("estimator", existing_type=sa.String(length=100), nullable=True)
        batch.add_column(sa.Column("trainer", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("trainer_sha256", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("trainer_failure", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("trainer_failure")
        batch.drop_column("trainer_sha256")
        batch.drop_column("trainer")
        batch.alter_column("estimator", existing_type=sa.String(length=100), nullable=False)
