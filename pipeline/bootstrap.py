"""Bring a store up to date on start: data dir, migrations, and the demo model on a fresh store."""

from __future__ import annotations

import logging

from pipeline.config import Settings
from pipeline.db import Database
from pipeline.migrate import upgrade
from pipeline.registry import seed_demo_model

log = logging.getLogger(__name__)


def prepare_store(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url)
    db = Database.from_settings(settings)
    try:
        model = seed_demo_model(db, owner_user_id=settings.admin_user_id)
        if model is not None:
            log.info("registered demo model %s as id %s", model.name, model.id)
    finally:
        db.dispose()
