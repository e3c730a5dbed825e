"""The composition root: the one place that builds the runtime parts of a process, and start-up.

The entry points (the API's `api.app.create_app`, the Dagster resources in `assets.resources` and
`sensors.resources`, the CLI) build their `Services` (`pipeline.services`) and prepare the store
here; nothing below them imports this module. Settings are read when a caller builds a
`Services` (from `get_settings()`/`load_settings()`), never at import, so importing the code
location or the app reads no environment. The PII analyzer is not held here: it is one
lazily built instance per process (`pipeline.checks.pii`), loaded on the first scan.

`prepare_store` brings a store up to date on start (data dir, migrations, the demo models), one
process at a time (`pipeline.core.store_lock`); `remove_abandoned_temp_files` removes what a
process that died left behind.
"""

from __future__ import annotations

import logging

from pipeline.core.config import Settings
from pipeline.core.store_lock import store_preparation_lock
from pipeline.core.tempfiles import sweep
from pipeline.intake.receiving import UPLOAD_DIR_PREFIX, upload_tmp_root
from pipeline.models.registry import seed_demo_models
from pipeline.services import Services
from pipeline.store.objectstore import TEMP_PREFIX, TEMP_SUFFIX

log = logging.getLogger(__name__)


def prepare_store(settings: Settings) -> None:
    # Alembic (with Mako and Pygments, about 12 MB) is imported here only: an API process,
    # whose store `marketplace serve` prepares in a child, never holds it.
    from pipeline.core.migrate import upgrade

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    # Other processes may be preparing the same store right now (every API replica, `dev` and a
    # CLI command): the first migrates and registers the demo models, the next find it done.
    with store_preparation_lock(url):
        upgrade(url)
        with Services(settings) as services:
            demo = seed_demo_models(services.db, services.store, settings.admin_user_id)
            for model in demo:
                log.info("registered demo model %s as id %s", model.name, model.id)


def remove_abandoned_temp_files(settings: Settings) -> int:
    """Upload temp folders and half-written local objects left by a process that died."""
    removed = sweep(upload_tmp_root(settings), f"{UPLOAD_DIR_PREFIX}*")
    if not settings.uses_s3:
        removed += sweep(settings.objects_dir, f"{TEMP_PREFIX}*{TEMP_SUFFIX}", recursive=True)
    return removed
