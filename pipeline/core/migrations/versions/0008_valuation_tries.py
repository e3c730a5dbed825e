"""try budgets: valuation tries per supplier, minimum meaningful improvement per model

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing models get the documented default (docs/rewards.md).
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("min_improvement_pct", sa.Float(), server_default="0.5", nullable=False)
        )
    op.create_table(
        "valuation_tries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("valuation_id", sa.String(length=36), nullable=True),
        sa.Column("contribution_id", sa.String(length=36), nullable=False),
        sa.Column("submitter_id", sa.String(length=200), nullable=False),
        sa.Column("stream", sa.String(length=20), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("level", sa.Float(), nullable=False),
        sa.Column("bound_pct", sa.Float(), nullable=True),
        sa.Column("min_improvement_pct", sa.Float(), nullable=False),
        sa.Column("accepted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["contribution_id"],
            ["contributions.id"],
            name=op.f("fk_valuation_tries_contribution_id_contributions"),
        ),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_valuation_tries_model_id_models")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_valuation_tries")),
        sa.UniqueConstraint("contribution_id", name=op.f("uq_valuation_tries_contribution_id")),
    )
    op.create_index(op.f("ix_valuation_tries_model_id"), "valuation_tries", ["model_id"])
    op.create_table(
        "valuation_try_identities",
        sa.Column("try_id", sa.Integer(), nullable=False),
        sa.Column("identity", sa.String(length=250), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["try_id"],
            ["valuation_tries.id"],
            name=op.f("fk_valuation_try_identities_try_id_valuation_tries"),
        ),
        sa.PrimaryKeyConstraint("try_id", "identity", name=op.f("pk_valuation_try_identities")),
    )
    op.create_index(
        "ix_valuation_try_identities_lookup",
        "valuation_try_identities",
        ["model_id", "identity"],
    )


def downgrade() -> None:
    op.drop_index("ix_valuation_try_identities_lookup", table_name="valuation_try_identities")
    op.drop_table("valuation_try_identities")
    op.drop_index(op.f("ix_valuation_tries_model_id"), table_name="valuation_tries")
    op.drop_table("valuation_tries")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("min_improvement_pct")
