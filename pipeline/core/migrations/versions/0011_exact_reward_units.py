"""exact reward amounts: reward_ledger.units, integer base units of the 18-decimal token

Existing rows get the base units of their float `tokens` read from its decimal `repr` (the
shortest decimal that reads back as the same float): 4.96125 tokens become
4961250000000000000 units. The ledger's floats were rounded to millionths when written, which 18
decimals hold exactly, so no amount changes. `tokens` stays as it was.

The conversion is written out here rather than imported: a migration stays as it was run.

Revision ID: 0011
Revises: 0008
"""

from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNITS_PER_TOKEN = 10**18


def _units(tokens: float) -> int:
    exact = Decimal(repr(float(tokens))) * _UNITS_PER_TOKEN
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def upgrade() -> None:
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    column_type: sa.types.TypeEngine[Any] = sa.String(78) if sqlite else sa.Numeric(78, 0)
    op.add_column("reward_ledger", sa.Column("units", column_type, nullable=True))
    ledger = sa.table(
        "reward_ledger",
        sa.column("id", sa.Integer()),
        sa.column("tokens", sa.Float()),
        sa.column("units", column_type),
    )
    rows = bind.execute(sa.select(ledger.c.id, ledger.c.tokens)).all()
    for row_id, tokens in rows:
        units = _units(tokens or 0.0)
        bind.execute(
            ledger.update()
            .where(ledger.c.id == row_id)
            .values(units=str(units) if sqlite else Decimal(units))
        )
    with op.batch_alter_table("reward_ledger", schema=None) as batch_op:
        batch_op.alter_column("units", existing_type=column_type, nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("reward_ledger", schema=None) as batch_op:
        batch_op.drop_column("units")
