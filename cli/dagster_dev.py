"""`dagster dev` whose webserver is the guarded one (`python -m cli.dagster_dev dev …`).

`dagster dev` starts its webserver as `python -m dagster_webserver …`; this starts
`python -m cli.dagster_webserver …` with the same arguments instead (cli/webserver_guard.py).
The daemon and the code server start as `dagster dev` starts them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

WEBSERVER_MODULE = "dagster_webserver"
GUARDED_MODULE = "cli.dagster_webserver"


def guarded_command(command: Sequence[str]) -> list[str]:
    """The command with the guarded webserver in place of Dagster's; others unchanged."""
    words = list(command)
    if words[1:3] == ["-m", WEBSERVER_MODULE]:
        words[2] = GUARDED_MODULE
    return words


def main() -> None:
    import dagster._cli.dev as dev
    from dagster._cli import main as dagster_main

    open_subprocess = dev.open_ipc_subprocess
    started: list[str] = []

    def open_guarded(parts: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        words = guarded_command(parts)
        if not started:
            # The webserver is the first process `dagster dev` opens; never serve it unguarded.
            if words[1:3] != ["-m", GUARDED_MODULE]:
                raise RuntimeError(
                    f"dagster dev did not start its webserver as `-m {WEBSERVER_MODULE}` "
                    f"(it started {' '.join(words[:3])}): refusing to serve it unguarded"
                )
            started.append(GUARDED_MODULE)
        return open_subprocess(words, **kwargs)

    dev.open_ipc_subprocess = open_guarded
    dagster_main()


if __name__ == "__main__":
    main()
