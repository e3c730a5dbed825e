"""The FastAPI application factory: one app per settings, routers per spec section."""

from __future__ import annotations

import logging
import re

from fastapi import FastAPI

from api.errors import install_error_handlers
from api.limits import BodySizeLimit
from api.routes import (
    arrivals,
    benchmarks,
    contract,
    contributions,
    docs,
    keys,
    org_keys,
    rewards,
    schedules,
    web,
)
from pipeline.auth.ratelimit import KeyRateLimiter
from pipeline.auth.verification import KeyVerifier
from pipeline.bootstrap import remove_abandoned_temp_files
from pipeline.core.config import Settings, get_settings
from pipeline.core.db import Database
from pipeline.store.objectstore import object_store_from_settings

UPLOAD_PATH = re.compile(r"^/api/v1/benchmarks/upload/")
# Multipart framing and the small form fields ride on top of the file itself.
MULTIPART_OVERHEAD = 1024 * 1024


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    logging.getLogger("pipeline").setLevel(settings.pipeline_log_level)
    app = FastAPI(
        title="Data-contribution marketplace",
        version="0.1.0",
        description="Per-model data-specs, contributions, benchmark uploads, "
        "evaluation schedules, dataset arrivals and API keys.",
        # Served by api.routes.docs from packaged assets instead of FastAPI's CDN pages.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    # An API process killed mid-upload leaves its temp files; nobody else would remove them.
    remove_abandoned_temp_files(settings)
    app.state.db = Database.from_settings(settings)
    app.state.store = object_store_from_settings(settings)
    app.state.key_verifier = KeyVerifier(app.state.db, KeyRateLimiter.from_settings(settings))
    install_error_handlers(app)
    for module in (contract, contributions, keys, org_keys, schedules, arrivals, web, benchmarks):
        app.include_router(module.router)
    app.include_router(rewards.router)
    app.include_router(docs.router)

    def limit_for(path: str) -> int:
        if UPLOAD_PATH.match(path):
            return settings.upload_max_bytes + MULTIPART_OVERHEAD
        return settings.contribution_max_body_bytes

    app.add_middleware(BodySizeLimit, limit_for=limit_for)

    @app.get("/healthz", tags=["ops"], summary="Liveness")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
