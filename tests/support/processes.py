"""Helpers for tests that start `marketplace` processes and watch their trees through /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Generator, Sequence
from pathlib import Path

from tests.cli.test_dev_command import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
# Strong enough for `marketplace serve`'s floor (pipeline/core/secret_strength.py).
JWT_SECRET = "uoTOrhlsMEnU7YCOKPSaWn87pZITvRedZSGL-5QTcmo"
ADMIN_TOKEN = "HM0c9Nimd73g_lXU1VlxxfVMHyRHiutx2PZuBFBvuAU"
GRACE = 10
# Slack over the grace for process exit and our polling, on a loaded 2-core machine.
MARGIN = 15


def process_state(pid: int) -> str | None:
    """The /proc state letter of a process, None when it no longer exists."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    state = process_state(pid)
    return state is not None and state not in {"Z", "X"}  # a zombie has already exited


def descendants(root: int) -> dict[int, str]:
    """Every process below `root` (pid -> command line), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: dict[int, str] = {}
    stack = [root]
    while stack:
        for pid in children.get(stack.pop(), []):
            try:
                found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            stack.append(pid)
    return found


def wait_all_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [pid for pid in pids if alive(pid)]
        if not left:
            return []
        time.sleep(0.2)
    return [pid for pid in pids if alive(pid)]


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "MARKETPLACE_DATA_DIR": str(data_dir),
        "JWT_SECRET": JWT_SECRET,
        "ADMIN_TOKEN": ADMIN_TOKEN,
        "SHUTDOWN_GRACE_SECONDS": str(GRACE),
    }
    for name in ("DATABASE_URL", "DAGSTER_HOME", "SERVICE_DATASET_BUCKET", "DAGSTER_PG_URL"):
        env.pop(name, None)
    env.update(extra)  # what the test sets wins, DATABASE_URL included
    return env


class Started:
    """Processes a test starts, and the pids of their trees it recorded."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.recorded: set[int] = set()

    def record(self, proc: subprocess.Popen[bytes]) -> dict[int, str]:
        tree = descendants(proc.pid)
        self.recorded.update(tree)
        return tree


def started_processes() -> Generator[Started, None, None]:
    """For a fixture: whatever is left of the started trees is killed afterwards."""
    record = Started()
    try:
        yield record
    finally:  # also when the generator is closed early (a fixture's set-up failed)
        for proc in record.procs:
            record.recorded.update(descendants(proc.pid))
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in record.recorded:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def start(
    command: list[str], tmp_path: Path, started: Started, **env: str
) -> subprocess.Popen[bytes]:
    """`marketplace COMMAND` on the data dir tmp_path/data, its output in tmp_path/server.log."""
    log = (tmp_path / "server.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", *command],
        cwd=REPO,
        env=server_env(tmp_path / "data", **env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    started.procs.append(proc)
    return proc


def start_serve(
    tmp_path: Path,
    started: Started,
    args: Sequence[str] = (),
    ready_seconds: float = 60,
    **env: str,
) -> tuple[subprocess.Popen[bytes], str]:
    """`marketplace serve [ARGS]` on a free port, answering; returns the process and its URL."""
    port = free_port()
    proc = start(["serve", "--port", str(port), *args], tmp_path, started, **env)
    url = f"http://127.0.0.1:{port}"
    wait_for(f"{url}/healthz", proc, ready_seconds)
    return proc, url


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "server.log").read_text(errors="replace")[-3000:]


def stop_group(proc: subprocess.Popen[bytes], grace: float = 20) -> None:
    """SIGTERM a process started in its own session, and its whole group; SIGKILL after `grace`."""
    stop_groups([proc], grace)


def stop_groups(procs: Sequence[subprocess.Popen[bytes]], grace: float = 20) -> None:
    """`stop_group` for several processes at once: all are signalled before any is waited for,
    so their shutdowns overlap."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
