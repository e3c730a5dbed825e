"""Dagster's webserver behind the guard (`python -m cli.dagster_webserver`, its own options).

The same command line as `dagster-webserver`; the app it serves is wrapped in
`cli.webserver_guard.WebserverGuard` before uvicorn gets it. Allowed hosts: loopback, the
`--host` it binds (unless a wildcard) and DAGSTER_UI_ALLOWED_HOSTS.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from cli.webserver_guard import WebserverGuard

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def bound_host(argv: Sequence[str]) -> str:
    """The value of `-h`/`--host` in a dagster-webserver command line ('' when absent)."""
    for index, word in enumerate(argv):
        if word in ("-h", "--host") and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith("--host="):
            return word.partition("=")[2]
    return ""


def allowed_hosts(argv: Sequence[str], configured: Sequence[str]) -> set[str]:
    host = bound_host(argv)
    return {*configured, *([] if host in WILDCARD_HOSTS else [host])}


def main() -> None:
    import dagster_webserver.cli as webserver

    from pipeline.core.config import load_settings

    allowed = allowed_hosts(sys.argv[1:], load_settings().dagster_ui_allowed_hosts)
    build_app = webserver.create_app_from_workspace_process_context

    def guarded_app(*args: Any, **kwargs: Any) -> WebserverGuard:
        return WebserverGuard(build_app(*args, **kwargs), allowed)

    # `host_dagster_ui_with_workspace_process_context` builds the app through this name.
    webserver.create_app_from_workspace_process_context = guarded_app  # type: ignore[assignment]
    webserver.main()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
