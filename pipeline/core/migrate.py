"""Alembic wiring: apply the migrations in `pipeline/core/migrations` to the configured database.

`upgrade` takes no lock: where other processes may migrate the same store at once, call it
inside `pipeline.core.store_lock.store_preparation_lock`, as `prepare_store` and
`marketplace db upgrade` do.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # '%' must be escaped for configparser; URLs with encoded passwords contain it.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)
