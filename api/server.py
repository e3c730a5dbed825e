"""How the API is served: uvicorn's configuration from the settings, for one or N processes.

`marketplace serve`, `marketplace dev` and the tests' live servers all take their uvicorn
configuration from `server_config`, so each runs with the same bounds (`api.http_bounds`) and
the same single source of the client address (`api.client_address`; uvicorn's proxy-header
rewriting is off). With N worker processes the app is given as the factory's import path: each
worker process (started by uvicorn's supervisor with `spawn`, a fresh interpreter) builds its
own app, settings, engines, pools and clients; nothing is created before the fork.
"""

from __future__ import annotations

from typing import Any

import uvicorn

from api.http_bounds import BoundedHttpToolsProtocol, HttpBounds
from pipeline.core.config import Settings

APP_FACTORY = "api.app:create_app"
WORKER_HEALTHCHECK_SECONDS = 60


def server_config(
    settings: Settings,
    app: Any = APP_FACTORY,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    quiet: bool = False,
    **overrides: Any,
) -> uvicorn.Config:
    """uvicorn's Config for `app` (an ASGI app, or the factory's import path for workers).

    `quiet` (dev): no request log and no start-up lines.
    """
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "workers": workers,
        "factory": isinstance(app, str),
        "http": BoundedHttpToolsProtocol,
        # No WebSocket routes: an upgrade request is served as plain HTTP (404), never handed
        # to a protocol without the bounds.
        "ws": "none",
        "proxy_headers": False,
        "timeout_keep_alive": settings.http_keepalive_seconds,
        "timeout_graceful_shutdown": settings.shutdown_grace_seconds,
        # The supervisor replaces a worker that does not answer its ping in time, from the
        # moment it is started: uvicorn's 5 s made a loaded machine (load 15 on 2 cores, a
        # worker's interpreter still importing) replace every worker, over and over.
        "timeout_worker_healthcheck": WORKER_HEALTHCHECK_SECONDS,
        "log_level": "warning" if quiet else "info",
        "access_log": not quiet,
    }
    options.update(overrides)
    config = uvicorn.Config(app, **options)
    # Read by the protocol in each worker (the config is pickled to spawned workers).
    config.http_bounds = HttpBounds.from_settings(settings)  # type: ignore[attr-defined]
    return config
