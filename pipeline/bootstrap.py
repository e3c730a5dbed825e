"""Bring a store up to date on start: data dir, migrations, the demo model on a fresh store, and
no temp files left by a process that died."""

from __future__ import annotations

import logging

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.migrate import upgrade
from pipeline.core.tempfiles import sweep
from pipeline.intake.receiving import UPLOAD_DIR_PREFIX, upload_tmp_root
from pipeline.models.registry import seed_demo_model
from pipeline.store.objectstore import TEMP_PREFIX, TEMP_SUFFIX

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


def remove_abandoned_temp_files(settings: Settings) -> int:
    """Upload temp folders and half-written local objects left by a process that died."""
    removed = sweep(upload_tmp_root(settings), f"{UPLOAD_DIR_PREFIX}*")
    if not settings.uses_s3:
        removed += sweep(settings.objects_dir, f"{TEMP_PREFIX}*{TEMP_SUFFIX}", recursive=True)
    return removed
