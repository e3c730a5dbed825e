"""`dagster-daemon` for tests, its backfill loop waking every 5 s instead of every 30.

Dagster hard-codes the pause between two iterations of its backfill daemon
(`dagster._daemon.controller.DEFAULT_DAEMON_INTERVAL_SECONDS`, read when the loop starts), so a
test that launches an asset backfill spent up to 30 s before the first run was requested and up
to 30 s more before the finished backfill was marked complete. Nothing else about the daemon
changes. Run as `python -m tests.support.dagster_daemon run -w workspace.yaml`.
"""

from __future__ import annotations

import dagster._daemon.controller as controller
from dagster._daemon.cli import main

# Each iteration costs some CPU (it re-reads the instance); 5 s keeps that small on two cores.
INTERVAL_SECONDS = 5

if __name__ == "__main__":
    controller.DEFAULT_DAEMON_INTERVAL_SECONDS = INTERVAL_SECONDS
    main()  # Click's standalone mode exits the process itself.
