"""Shared by the benchmarks: start `marketplace serve` on a temp embedded store and wait for it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

# Strong enough for `marketplace serve`'s floor (pipeline/core/secret_strength.py).
JWT_SECRET = "KDPCYve44uVbkbhZS9-Z4lIrActHDl6hhCCbTBv81s8"
ADMIN_TOKEN = "ng-4EH9SacoYT7Ej8FWQQ4eiu-C12RdA7WcdOAnXwhk"


@dataclass
class Server:
    url: str
    pid: int | None
    data_dir: Path | None
    env: dict[str, str]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def embedded_server(
    extra_env: dict[str, str] | None = None, args: list[str] | None = None
) -> Iterator[Server]:
    """`marketplace serve [ARGS]` on a fresh temp data dir (SQLite + local folder unless
    `extra_env` says otherwise)."""
    with tempfile.TemporaryDirectory(prefix="mk-bench-") as tmp:
        port = free_port()
        env = {
            **os.environ,
            "MARKETPLACE_DATA_DIR": tmp,
            "JWT_SECRET": JWT_SECRET,
            "ADMIN_TOKEN": ADMIN_TOKEN,
        }
        for name in ("DATABASE_URL", "SERVICE_DATASET_BUCKET", "DATASET_ARRIVAL_SQS_QUEUE_URL"):
            env.pop(name, None)
        # What the caller sets wins, DATABASE_URL included (a benchmark on PostgreSQL).
        env.update(extra_env or {})
        log = open(Path(tmp) / "server.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(port), *(args or [])],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parent.parent,
        )
        url = f"http://127.0.0.1:{port}"
        workers = int(args[args.index("--workers") + 1]) if args and "--workers" in args else 1
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    answers = httpx.get(f"{url}/healthz", timeout=1).status_code == 200
                except httpx.TransportError:
                    answers = False
                # Every worker serving, not just the first one up.
                started = (Path(tmp) / "server.log").read_text(errors="replace")
                if answers and started.count("Application startup complete.") >= workers:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "server did not start:\n" + (Path(tmp) / "server.log").read_text()
                    )
                time.sleep(0.2)
            yield Server(url=url, pid=proc.pid, data_dir=Path(tmp), env=env)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM of a process in MB (Linux), or None if unavailable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
