"""Benchmark: what the request bounds (api/http_bounds.py) cost a normal request.

    python bench/http_bounds.py [--seconds 40] [--clients 20] [--slices 8]

Starts the same app twice on fresh SQLite stores, each in its own process: once as
`marketplace serve` runs it (`api.server.server_config`: the bounded httptools protocol) and
once on uvicorn's stock httptools protocol (the baseline; proxy headers off in both). Clients
(keep-alive, async httpx) send requests back to back, to each server in alternating slices so
that both see the same machine load: `GET /healthz` (the smallest request, where the protocol's
share of the cost is largest) and the demo model's public data-spec. Prints requests/s and the
server's CPU microseconds per request for both; last `ratio: X` = bounded ÷ stock requests/s on
`/healthz` (goal ≥ 0.95: the bounds must not slow normal requests noticeably).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.keys import Tally, free_port, process_cpu_seconds

REPO_ROOT = Path(__file__).resolve().parent.parent

SERVER_SCRIPT = """
import sys
import uvicorn
from api.app import create_app
from api.server import server_config
from pipeline.bootstrap import prepare_store
from pipeline.core.config import get_settings

settings = get_settings()
prepare_store(settings)
app = create_app(settings)
if sys.argv[1] == "bounded":
    config = server_config(settings, app, port={port}, quiet=True)
else:
    config = uvicorn.Config(app, port={port}, http="httptools", ws="none", proxy_headers=False,
                            log_level="warning", access_log=False)
uvicorn.Server(config).run()
"""


@contextmanager
def own_server(kind: str) -> Iterator[tuple[str, int]]:
    """The app in a subprocess with the `bounded` or `stock` protocol: (URL, pid)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="mk-bench-") as data_dir:
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
        env.update(
            MARKETPLACE_DATA_DIR=data_dir,
            JWT_SECRET=secrets.token_urlsafe(32),
            PYTHONPATH=str(REPO_ROOT),
        )
        process = subprocess.Popen(
            [sys.executable, "-c", SERVER_SCRIPT.format(port=port), kind], cwd=REPO_ROOT, env=env
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"the {kind} server did not start")
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            yield url, process.pid
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def _slice(clients: list[httpx.AsyncClient], url: str, seconds: float, tally: Tally) -> None:
    """Each client sends its next request as soon as the previous answer arrived."""
    stop = time.perf_counter() + seconds

    async def one(client: httpx.AsyncClient) -> None:
        while time.perf_counter() < stop:
            response = await client.get(url)
            if response.status_code == 200:
                tally.ok += 1
            else:
                tally.failed += 1

    started = time.perf_counter()
    await asyncio.gather(*(one(client) for client in clients))
    tally.seconds += time.perf_counter() - started


async def _measure(
    servers: dict[str, tuple[str, int]], path: str, clients: int, seconds: float, slices: int
) -> dict[str, tuple[Tally, float]]:
    # Clients are made once: building one (its TLS context) costs more than many requests.
    pools = {kind: [httpx.AsyncClient(timeout=30) for _ in range(clients)] for kind in servers}
    tallies = {kind: Tally() for kind in servers}
    cpu = dict.fromkeys(servers, 0.0)
    try:
        for kind, (url, _) in servers.items():
            await _slice(pools[kind], f"{url}{path}", 1.0, Tally())  # warm-up
        for _ in range(slices):
            for kind, (url, pid) in servers.items():
                before = process_cpu_seconds(pid) or 0.0
                await _slice(pools[kind], f"{url}{path}", seconds / slices, tallies[kind])
                cpu[kind] += (process_cpu_seconds(pid) or 0.0) - before
    finally:
        for pool in pools.values():
            for client in pool:
                await client.aclose()
    return {kind: (tallies[kind], cpu[kind]) for kind in servers}


def measure(
    servers: dict[str, tuple[str, int]], path: str, clients: int, seconds: float, slices: int
) -> dict[str, tuple[Tally, float]]:
    """Alternating slices per server: its tally and its CPU seconds."""
    return asyncio.run(_measure(servers, path, clients, seconds, slices))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="per server and path")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--slices", type=int, default=8)
    args = parser.parse_args()
    ratio = None
    with own_server("bounded") as bounded, own_server("stock") as stock:
        servers = {"bounded": bounded, "stock": stock}
        for name, path in (("healthz", "/healthz"), ("data_spec", "/api/models/1/data-spec")):
            results = measure(servers, path, args.clients, args.seconds, args.slices)
            for kind, (tally, cpu) in results.items():
                print(f"{name}_{kind}_requests_per_second: {tally.rate:.1f}")
                print(f"{name}_{kind}_cpu_us_per_request: {cpu / max(tally.ok, 1) * 1e6:.0f}")
                print(f"{name}_{kind}_errors: {tally.failed}")
            rate = results["bounded"][0].rate / results["stock"][0].rate
            print(f"{name}_bounded_vs_stock: {rate:.3f}")
            if ratio is None:
                ratio = rate
    print(f"ratio: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
