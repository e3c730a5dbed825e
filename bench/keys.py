"""Benchmark: an API-key-authenticated GET against the same server's public GET, and verify latency.

    python bench/keys.py                       # starts its own server (SQLite, temp data dir)
    python bench/keys.py --url http://host:8000 --admin-token TOKEN

Load: `--clients` concurrent keep-alive clients on loopback (default 20) for `--duration` seconds
per endpoint (default 20), the two endpoints alternating in slices so drift hits both alike:
  public:        GET /api/models/{id}/data-spec   (no credential, one database read)
  authenticated: GET /api/v1/whoami               (platform API key: hash lookup, allowed_ips,
                                                   scopes, rate limit, last_used_at throttle)
Each client slot has its own key (rate_limit_per_hour 100000), so the run never reaches a limit.
Verify: sequential POST /api/v1/keys/verify calls with a `prediction` key that has a monthly
prediction limit (so each call also does the atomic quota upsert), p50 and p99 client-side, taken
with a minimal keep-alive HTTP/1.1 client on a raw socket (so the figure is the server plus
loopback, not Python HTTP-client overhead), and again with httpx for comparison.

Prints `figure: value` lines, the last one `ratio: X` (authenticated req/s over public req/s).
Goals: ratio >= 0.8, verify p99 < 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent

SERVER_SCRIPT = """
import uvicorn
from api.app import create_app
from pipeline.bootstrap import prepare_store
from pipeline.core.config import get_settings

settings = get_settings()
prepare_store(settings)
uvicorn.run(create_app(settings), host="127.0.0.1", port={port}, log_level="warning",
            access_log=False)
"""


@dataclass
class Server:
    url: str
    admin_token: str
    pid: int | None = None


@dataclass
class Tally:
    ok: int = 0
    failed: int = 0
    seconds: float = 0.0
    cpu_seconds: float | None = None
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def process_cpu_seconds(pid: int | None) -> float | None:
    """User plus system CPU time of a process (Linux /proc), or None when unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


@contextmanager
def own_server() -> Iterator[Server]:
    """uvicorn in a subprocess over a fresh SQLite store in a temp data dir."""
    port = free_port()
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="mk-bench-") as data_dir:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"DATABASE_URL", "REDIS_URL", "SERVICE_DATASET_BUCKET", "TRUSTED_PROXIES"}
        }
        env.update(
            MARKETPLACE_DATA_DIR=data_dir,
            ADMIN_TOKEN=token,
            JWT_SECRET=secrets.token_urlsafe(32),
            PYTHONPATH=str(REPO_ROOT),
        )
        log = open(Path(data_dir) / "server.log", "w")  # noqa: SIM115 - closed below
        process = subprocess.Popen(
            [sys.executable, "-c", SERVER_SCRIPT.format(port=port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    log.flush()
                    sys.exit("server exited:\n" + (Path(data_dir) / "server.log").read_text())
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    sys.exit("server did not answer /healthz within 60 s")
                time.sleep(0.2)
            yield Server(url=url, admin_token=token, pid=process.pid)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def create_key(server: Server, **body: object) -> str:
    response = httpx.post(
        f"{server.url}/api/v1/keys",
        json=body,
        headers={"Authorization": f"Bearer {server.admin_token}"},
        timeout=10,
    )
    if response.status_code != 201:
        sys.exit(f"could not create a key: {response.status_code} {response.text}")
    value: str = response.json()["api_key"]
    return value


async def load(
    url: str, headers_per_client: list[dict[str, str]], seconds: float, tally: Tally
) -> None:
    """Each client sends its next request as soon as the previous answer arrived."""
    stop = time.perf_counter() + seconds

    async def client(headers: dict[str, str]) -> None:
        async with httpx.AsyncClient(headers=headers, timeout=10) as http:
            while time.perf_counter() < stop:
                response = await http.get(url)
                if response.status_code == 200:
                    tally.ok += 1
                else:
                    tally.failed += 1
                    tally.statuses[response.status_code] = (
                        tally.statuses.get(response.status_code, 0) + 1
                    )

    started = time.perf_counter()
    await asyncio.gather(*(client(h) for h in headers_per_client))
    tally.seconds += time.perf_counter() - started


def run_load(
    server: Server, public_url: str, auth_url: str, keys: list[str], duration: float, slices: int
) -> tuple[Tally, Tally]:
    public, auth = Tally(), Tally()
    anonymous: list[dict[str, str]] = [{} for _ in keys]
    with_keys = [{"Authorization": f"Bearer {key}"} for key in keys]
    # Warm both paths (connections, caches, first-use writes) before measuring.
    asyncio.run(load(public_url, anonymous, 1.0, Tally()))
    asyncio.run(load(auth_url, with_keys, 1.0, Tally()))
    piece = duration / slices
    public_cpu = auth_cpu = 0.0
    for _ in range(slices):
        for tally, url, headers in ((public, public_url, anonymous), (auth, auth_url, with_keys)):
            before = process_cpu_seconds(server.pid)
            asyncio.run(load(url, headers, piece, tally))
            after = process_cpu_seconds(server.pid)
            if before is not None and after is not None:
                if tally is public:
                    public_cpu += after - before
                else:
                    auth_cpu += after - before
    if server.pid is not None:
        public.cpu_seconds, auth.cpu_seconds = public_cpu, auth_cpu
    return public, auth


class RawHttp:
    """A minimal keep-alive HTTP/1.1 client on one socket: it adds next to no client-side time,
    so its latencies are the server's plus loopback. Handles Content-Length responses only."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError("only http:// URLs")
        self.host = parts.netloc
        self.sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def post_json(self, path: str, body: object) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + data)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        header, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = header.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in lines
            if line.lower().startswith(b"content-length")
        )
        while len(self.buffer) < length:
            self.buffer += self._recv()
        payload, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, payload

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def verify_latencies(server: Server, key: str, samples: int, *, raw: bool) -> list[float]:
    """Sequential verify calls (after 100 warm-up calls), in milliseconds."""
    times: list[float] = []
    body = {"api_key": key}
    if raw:
        client = RawHttp(server.url)
        call = lambda: client.post_json("/api/v1/keys/verify", body)  # noqa: E731
        close = client.close
    else:
        http = httpx.Client(base_url=server.url, timeout=10)

        def call() -> tuple[int, bytes]:
            response = http.post("/api/v1/keys/verify", json=body)
            return response.status_code, response.content

        close = http.close
    try:
        for i in range(samples + 100):
            started = time.perf_counter()
            status, payload = call()
            elapsed = time.perf_counter() - started
            if status != 200 or not json.loads(payload).get("valid"):
                sys.exit(f"verify failed: {status} {payload[:200]!r}")
            if i >= 100:
                times.append(elapsed * 1000)
    finally:
        close()
    return times


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


@dataclass
class Measured:
    """What one run measured: both endpoints' load and the verify latencies (ms)."""

    public: Tally
    auth: Tally
    latencies: list[float]
    via_httpx: list[float]
    raw: bool  # whether `latencies` came from the raw socket client (plain HTTP only)


def measure(server: Server, args: argparse.Namespace) -> Measured:
    """Keys for every client and one prediction key, then the load and the verify calls."""
    keys = [
        create_key(server, name=f"bench {i}", service_id="platform", rate_limit_per_hour=100_000)
        for i in range(args.clients)
    ]
    prediction = create_key(
        server,
        name="bench verify",
        service_id="prediction",
        rate_limit_per_hour=100_000,
        monthly_prediction_limit=10_000_000,
    )
    public_url = f"{server.url}/api/models/{args.model_id}/data-spec"
    auth_url = f"{server.url}/api/v1/whoami"
    public, auth = run_load(server, public_url, auth_url, keys, args.duration, args.slices)
    raw = server.url.startswith("http://")
    latencies = verify_latencies(server, prediction, args.verify_samples, raw=raw)
    via_httpx = verify_latencies(server, prediction, args.verify_samples, raw=False)
    return Measured(public, auth, latencies, via_httpx, raw)


def report(server: Server, clients: int, measured: Measured) -> None:
    """The `figure: value` lines, `ratio: X` last."""
    public, auth, latencies = measured.public, measured.auth, measured.latencies
    print(f"server: {'own (uvicorn, SQLite, memory rate limiter)' if server.pid else server.url}")
    print(f"clients: {clients}")
    print(f"seconds per endpoint: {public.seconds:.1f} / {auth.seconds:.1f}")
    print(f"public GET requests: {public.ok} ok, {public.failed} failed {public.statuses}")
    print(f"authenticated GET requests: {auth.ok} ok, {auth.failed} failed {auth.statuses}")
    print(f"public GET req/s: {public.rate:.1f}")
    print(f"authenticated GET req/s: {auth.rate:.1f}")
    if public.cpu_seconds is not None and auth.cpu_seconds is not None:
        for label, tally in (("public", public), ("authenticated", auth)):
            cost = (tally.cpu_seconds or 0.0) / max(tally.ok, 1) * 1e6
            print(f"{label} GET server CPU per request (us): {cost:.0f}")
    print(f"verify samples: {len(latencies)}")
    print(f"verify client: {'raw keep-alive socket' if measured.raw else 'httpx'}")
    print(f"verify p50 (ms): {statistics.median(latencies):.2f}")
    print(f"verify p99 (ms): {percentile(latencies, 0.99):.2f}")
    print(f"verify max (ms): {max(latencies):.2f}")
    print(f"verify p50 via httpx (ms): {statistics.median(measured.via_httpx):.2f}")
    print(f"verify p99 via httpx (ms): {percentile(measured.via_httpx, 0.99):.2f}")
    print(f"ratio: {auth.rate / public.rate:.3f}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server; default: start one")
    parser.add_argument("--admin-token", help="ADMIN_TOKEN of the server given with --url")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per endpoint")
    parser.add_argument("--slices", type=int, default=4, help="alternations per endpoint")
    parser.add_argument("--verify-samples", type=int, default=2000)
    parser.add_argument("--model-id", type=int, default=1, help="model of the public GET")
    args = parser.parse_args(argv)
    if args.url and not args.admin_token:
        parser.error("--url needs --admin-token")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.url:
        server = Server(url=args.url.rstrip("/"), admin_token=args.admin_token)
        report(server, args.clients, measure(server, args))
    else:
        with own_server() as server:
            report(server, args.clients, measure(server, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
