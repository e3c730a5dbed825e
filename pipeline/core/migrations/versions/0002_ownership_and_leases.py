"""model owners; contribution claim leases

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24 00:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing models get no owner: no key may change them until an operator runs
    # `marketplace models set-owner` (the demo model is given to the admin user on start).
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_user_id", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("owner_org_id", sa.String(length=36), nullable=True))
        batch_op.create_index(batch_op.f("ix_models_owner_org_id"), ["owner_org_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_models_owner_org_id_organizations"),
            "organizations",
            ["owner_org_id"],
            ["id"],
        )

    # Jobs claimed before this revision have no lease: the expiry treats them by updated_at.
    with op.batch_alter_table("contributions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claimed_by", sa.String(length=100), nullable=True))
        batch_op.add_column(
            sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("expired_claims", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.create_index(
            "ix_contributions_lease", ["status", "lease_expires_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("contributions", schema=None) as batch_op:
        batch_op.drop_index("ix_contributions_lease")
        batch_op.drop_column("expired_claims")
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("claimed_by")

    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_models_owner_org_id_organizations"), type_="foreignkey"
        )
        batch_op.drop_index(batch_op.f("ix_models_owner_org_id"))
        batch_op.drop_column("owner_org_id")
        batch_op.drop_column("owner_user_id")
