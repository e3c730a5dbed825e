"""A real uvicorn server for end-to-end tests: the app on a free loopback port, in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from pipeline.core.config import Settings

StartupTimeout = 20.0


@contextmanager
def serve(
    settings: Settings, wrap: Callable[[Any], Any] | None = None
) -> Iterator[tuple[str, Any]]:
    """Serve `create_app(settings)` (optionally wrapped as ASGI) on 127.0.0.1:<free port>.

    Yields the base URL and the app. The listening socket is bound before the server starts,
    so no other process can take the port in between.
    """
    from api.app import create_app
    from api.server import server_config

    app = create_app(settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # The same bounds and client-address rule as `marketplace serve`.
    config = server_config(
        settings,
        wrap(app) if wrap else app,
        quiet=True,
        lifespan="off",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + StartupTimeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        app.state.db.dispose()
