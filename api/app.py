"""The FastAPI application factory: one app per settings, routers per spec section."""

from __future__ import annotations

import re

from fastapi import FastAPI

from api.client_address import ClientAddress
from api.errors import install_error_handlers
from api.limits import BodySizeLimit
from api.openapi import install_openapi
from api.routes import (
    arrivals,
    benchmarks,
    contract,
    contributions,
    docs,
    integrity,
    keys,
    org_keys,
    rewards,
    schedules,
    settlements,
    wallets,
    web,
)
from pipeline.bootstrap import remove_abandoned_temp_files
from pipeline.core.config import Settings, get_settings
from pipeline.core.process_memory import configure_process_memory
from pipeline.services import Services
from pipeline.settlement.claim_events import chain_claims_reader
from pipeline.settlement.claims import chain_claimed_reader

UPLOAD_PATH = re.compile(r"^/api/v1/benchmarks/upload/")
# Multipart framing and the small form fields ride on top of the file itself.
MULTIPART_OVERHEAD = 1024 * 1024


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    # Before the first request's threads: an upload's two allocating threads (docs/api.md).
    configure_process_memory(settings)
    # The composition root builds the parts (and sets the pipeline's log level).
    services = Services(settings)
    app = FastAPI(
        title="Data-contribution marketplace",
        version="0.1.0",
        description="Per-model data-specs, contributions, benchmark uploads, "
        "evaluation schedules, dataset arrivals and API keys.",
        # Served by api.routes.docs from packaged assets instead of FastAPI's CDN pages.
        docs_url=None,
        redoc_url=None,
    )
    # An API process killed mid-upload leaves its temp files; nobody else would remove them.
    remove_abandoned_temp_files(settings)
    # Read by `api.deps`; the app lives as long as its process, and so do its parts.
    app.state.services = services
    app.state.settings = services.settings
    app.state.db = services.db
    app.state.store = services.store
    app.state.key_verifier = services.key_verifier()
    app.state.claimed_reader = chain_claimed_reader(services.settings)
    app.state.claims_reader = chain_claims_reader(services.settings)
    install_error_handlers(app)
    install_openapi(app, settings)
    for module in (
        contract,
        contributions,
        keys,
        org_keys,
        schedules,
        arrivals,
        web,
        benchmarks,
        integrity,
    ):
        app.include_router(module.router)
    app.include_router(rewards.router)
    app.include_router(settlements.router)
    app.include_router(wallets.router)
    app.include_router(docs.router)

    def limit_for(path: str) -> int:
        if UPLOAD_PATH.match(path):
            return settings.upload_max_bytes + MULTIPART_OVERHEAD
        return settings.contribution_max_body_bytes

    app.add_middleware(BodySizeLimit, limit_for=limit_for)
    # Outermost: everything inside, and uvicorn's access log, sees the address decided here.
    app.add_middleware(ClientAddress, trusted_proxies=settings.trusted_proxies)

    @app.get("/healthz", tags=["ops"], summary="Liveness")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
