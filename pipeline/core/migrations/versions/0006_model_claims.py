"""model claims: one run at a time values and pays a model's versions

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_claims",
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(length=100), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_model_claims_model_id_models")
        ),
        sa.PrimaryKeyConstraint("model_id", name=op.f("pk_model_claims")),
    )


def downgrade() -> None:
    op.drop_table("model_claims")
