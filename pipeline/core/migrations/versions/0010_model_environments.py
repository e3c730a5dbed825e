"""model environments: the environment a model folder's requirements.txt installed

Adds `models.trainer_env` (the environment's key, indexed: pruning looks up the keys in use),
`trainer_env_bytes` and `trainer_env_packages`. Existing models get NULL: their folders had no
requirements.txt environment and run with the service's packages, as before.

Revision ID: 0010
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("trainer_env", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("trainer_env_bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("trainer_env_packages", sa.JSON(), nullable=True))
        batch.create_index(batch.f("ix_models_trainer_env"), ["trainer_env"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_index(batch.f("ix_models_trainer_env"))
        batch.drop_column("trainer_env_packages")
        batch.drop_column("trainer_env_bytes")
        batch.drop_column("trainer_env")
