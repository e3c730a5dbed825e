"""Benchmark: concurrent contributors, each with its own session, POSTing 100-row contributions.

    python bench/load.py                    # own servers: PostgreSQL + Redis, then embedded SQLite
    python bench/load.py --url URL --jwt-secret SECRET [--clients 50] [--database-url URL]

Own servers (`marketplace serve`, fresh data dir each):
  postgres: a scratch database on --pg-admin-url's server (dropped afterwards) and REDIS_URL
            (--redis-url), once per worker count of --pg-workers (1,2: `serve --workers N`);
            1 client for --baseline-seconds (10), then --pg-clients (50) for --seconds (30);
  sqlite:   the embedded default, one worker; 1 client, then --sqlite-clients (20).
Each client is one contributor with its own session token and keep-alive connection, sending
POST /api/models/1/contributions with 100 demo rows back to back. After each phase every
acknowledged job is read back with its submitter's token (GET …/contributions/{jobId}), and the
stored rows are counted in the database (dataset version row counts) and, for own servers, in the
stored Parquet objects. "database is locked" is looked for in the answers and the server log.

Prints `figure: value` lines, requests/s per worker count side by side, and last `ratio: X` =
p99 ÷ p50 latency at the PostgreSQL client count, the worst over the worker counts (goal ≤ 4):
a fairness figure, which a queue that serves clients in turn meets on one core and one that
starves some clients does not. Goals: 0 errors of any kind, every acknowledged job readable,
rows stored == rows acknowledged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._server import JWT_SECRET, Server, embedded_server
from pipeline.auth.sessions import issue_token
from pipeline.core.config import Settings
from pipeline.demo.churn_data import churn_rows

MODEL_ID = 1
ROWS_PER_REQUEST = 100
LOCKED = "database is locked"


@dataclass
class Phase:
    """What one load phase saw, client side."""

    clients: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    acknowledged: list[tuple[str, str]] = field(default_factory=list)  # (token, jobId)
    locked: int = 0

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def contributor_bodies(count: int, seed: int) -> list[bytes]:
    """One request body per contributor: 100 real-shaped demo rows, different per contributor."""
    return [
        json.dumps(
            {
                "modelId": MODEL_ID,
                "benchmarkSpecId": None,
                "rows": churn_rows(ROWS_PER_REQUEST, seed=seed + i),
            }
        ).encode()
        for i in range(count)
    ]


async def _contributor(
    client: httpx.AsyncClient, token: str, body: bytes, deadline: float, phase: Phase
) -> None:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    path = f"/api/models/{MODEL_ID}/contributions"
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            response = await client.post(path, content=body, headers=headers)
        except httpx.HTTPError as exc:
            phase.latencies.append(time.perf_counter() - started)
            phase.errors[type(exc).__name__] += 1
            continue
        phase.latencies.append(time.perf_counter() - started)
        if response.status_code == 202:
            phase.acknowledged.append((token, str(response.json()["jobId"])))
            continue
        phase.errors[f"HTTP {response.status_code}"] += 1
        if LOCKED in response.text:
            phase.locked += 1


async def _load(url: str, tokens: list[str], bodies: list[bytes], seconds: float) -> Phase:
    phase = Phase(clients=len(tokens))
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with AsyncExitStack() as stack:
        # Every contributor's client is built before the clock starts. Building one loads the
        # CA bundle (about 50 ms of CPU here, even for plain http); built inside the phase, 50
        # of them held this process's event loop for 2-3 s while the first requests were
        # timed, and those 50 requests alone made the p99 of a 2,000-request phase.
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, timeout=120, limits=limits)
            )
            for _ in tokens
        ]
        started = time.monotonic()
        deadline = started + seconds
        await asyncio.gather(
            *(
                _contributor(c, t, b, deadline, phase)
                for c, t, b in zip(clients, tokens, bodies, strict=True)
            )
        )
        phase.seconds = time.monotonic() - started
    return phase


async def _read_jobs(url: str, acknowledged: list[tuple[str, str]]) -> tuple[int, int]:
    """(jobs readable by their submitter, rows they report) for the acknowledged jobs."""
    readable = rows = 0
    gate = asyncio.Semaphore(16)

    async def read(client: httpx.AsyncClient, token: str, job_id: str) -> None:
        nonlocal readable, rows
        async with gate:
            response = await client.get(
                f"/api/models/{MODEL_ID}/contributions/{job_id}",
                headers={"Authorization": f"Bearer {token}"},
            )
        if response.status_code == 200 and response.json().get("jobId") == job_id:
            readable += 1
            rows += int(response.json().get("submittedRows") or 0)

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await asyncio.gather(*(read(client, token, job) for token, job in acknowledged))
    return readable, rows


def stored_rows(database_url: str, job_ids: list[str], data_dir: Path | None) -> dict[str, int]:
    """Rows the database records for these jobs' dataset versions, and rows in their objects."""
    import pyarrow.parquet as pq
    from sqlalchemy import select

    from pipeline.core.db import Database
    from pipeline.core.tables import Contribution, DatasetVersion

    db = Database(database_url)
    found: dict[str, int] = {"jobs_in_database": 0, "rows_in_database": 0}
    keys: list[str] = []
    try:
        with db.session() as session:
            for start in range(0, len(job_ids), 500):
                chunk = job_ids[start : start + 500]
                query = (
                    select(DatasetVersion.row_count, DatasetVersion.object_key)
                    .join(Contribution, Contribution.dataset_version_id == DatasetVersion.id)
                    .where(Contribution.id.in_(chunk))
                )
                for row_count, key in session.execute(query):
                    found["jobs_in_database"] += 1
                    found["rows_in_database"] += int(row_count or 0)
                    keys.append(key)
    finally:
        db.dispose()
    if data_dir is not None:
        objects = data_dir / "objects"
        found["rows_in_objects"] = sum(
            pq.read_metadata(objects / key).num_rows for key in keys if (objects / key).is_file()
        )
    return found


def report(prefix: str, phase: Phase, baseline: Phase | None, checks: dict[str, int]) -> None:
    ok = phase.requests - phase.error_count
    print(f"{prefix}_clients: {phase.clients}")
    print(f"{prefix}_seconds: {phase.seconds:.1f}")
    print(f"{prefix}_requests: {phase.requests}")
    print(f"{prefix}_requests_per_second: {ok / phase.seconds:.1f}")
    print(f"{prefix}_rows_per_second: {ok * ROWS_PER_REQUEST / phase.seconds:.0f}")
    print(f"{prefix}_p50_ms: {percentile(phase.latencies, 0.50) * 1000:.0f}")
    print(f"{prefix}_p99_ms: {percentile(phase.latencies, 0.99) * 1000:.0f}")
    print(f"{prefix}_max_ms: {max(phase.latencies, default=0) * 1000:.0f}")
    print(f"{prefix}_errors: {phase.error_count}")
    if phase.errors:
        print(f"{prefix}_error_kinds: {dict(phase.errors)}")
    print(f"{prefix}_database_locked: {phase.locked + checks.get('locked_in_log', 0)}")
    print(f"{prefix}_rows_acknowledged: {len(phase.acknowledged) * ROWS_PER_REQUEST}")
    for name in ("rows_reported_by_jobs", "rows_in_database", "rows_in_objects"):
        if name in checks:
            print(f"{prefix}_{name}: {checks[name]}")
    print(f"{prefix}_jobs_readable: {checks['readable']}/{len(phase.acknowledged)}")
    if baseline is not None:
        print(f"{prefix}_baseline_requests_per_second: {baseline.requests / baseline.seconds:.1f}")
        print(f"{prefix}_baseline_p50_ms: {percentile(baseline.latencies, 0.50) * 1000:.0f}")
        print(f"{prefix}_baseline_p99_ms: {percentile(baseline.latencies, 0.99) * 1000:.0f}")
        print(f"{prefix}_baseline_errors: {baseline.error_count}")
        print(f"{prefix}_p99_vs_1_client: {p99_ratio(phase, baseline):.2f}")
    print(f"{prefix}_ratio_p99_p50: {fairness(phase):.2f}")


def p99_ratio(phase: Phase, baseline: Phase) -> float:
    """The goal before issue 19: p99 at N clients ÷ p99 at one (printed for comparison)."""
    return percentile(phase.latencies, 0.99) / percentile(baseline.latencies, 0.99)


def fairness(phase: Phase) -> float:
    """p99 ÷ p50 latency of one phase: how much worse the unluckiest requests fare."""
    return percentile(phase.latencies, 0.99) / percentile(phase.latencies, 0.50)


def passed(phase: Phase, checks: dict[str, int]) -> bool:
    acknowledged = len(phase.acknowledged) * ROWS_PER_REQUEST
    rows = [checks[n] for n in ("rows_in_database", "rows_in_objects") if n in checks]
    return (
        phase.error_count == 0
        and phase.locked == 0
        and checks.get("locked_in_log", 0) == 0
        and checks["readable"] == len(phase.acknowledged)
        and checks["rows_reported_by_jobs"] == acknowledged
        and all(count == acknowledged for count in rows)
    )


def run_phases(
    url: str,
    secret: str,
    clients: int,
    seconds: float,
    baseline_seconds: float,
    *,
    database_url: str | None,
    data_dir: Path | None,
    log: Path | None,
) -> tuple[Phase, Phase | None, dict[str, int]]:
    """A 1-client baseline (unless 0 s), then the concurrent phase and its checks."""
    run = uuid.uuid4().hex[:8]
    settings = Settings(jwt_secret=SecretStr(secret))
    tokens = [issue_token(settings, f"load-{run}-{i}") for i in range(clients)]
    bodies = contributor_bodies(clients, seed=1000)
    # Warm-up: the first request compiles the data-spec validator.
    httpx.post(
        f"{url}/api/models/{MODEL_ID}/contributions",
        content=bodies[0],
        headers={"Authorization": f"Bearer {tokens[0]}", "Content-Type": "application/json"},
        timeout=60,
    ).raise_for_status()
    baseline = None
    if baseline_seconds > 0:
        baseline = asyncio.run(_load(url, tokens[:1], bodies[:1], baseline_seconds))
    phase = asyncio.run(_load(url, tokens, bodies, seconds))
    readable, reported = asyncio.run(_read_jobs(url, phase.acknowledged))
    checks = {"readable": readable, "rows_reported_by_jobs": reported}
    if database_url:
        checks.update(stored_rows(database_url, [j for _, j in phase.acknowledged], data_dir))
    if log is not None and log.exists():
        checks["locked_in_log"] = log.read_text(errors="replace").count(LOCKED)
    return phase, baseline, checks


@contextmanager
def scratch_postgres(admin_url: str) -> Iterator[str]:
    """A new empty database on the admin URL's server, dropped afterwards."""
    from sqlalchemy import create_engine, make_url, text

    name = f"mk_bench_load_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def own_server_phases(
    clients: int, args: argparse.Namespace, extra_env: dict[str, str], workers: int = 1
) -> tuple[Phase, Phase | None, dict[str, int]]:
    with embedded_server(extra_env, ["--workers", str(workers)]) as server:
        return _own(server, clients, args, extra_env.get("DATABASE_URL"))


def _own(
    server: Server, clients: int, args: argparse.Namespace, database_url: str | None
) -> tuple[Phase, Phase | None, dict[str, int]]:
    assert server.data_dir is not None
    url = database_url or f"sqlite:///{server.data_dir / 'marketplace.db'}"
    return run_phases(
        server.url,
        JWT_SECRET,
        clients,
        args.seconds,
        args.baseline_seconds,
        database_url=url,
        data_dir=server.data_dir,
        log=server.data_dir / "server.log",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start own servers)")
    parser.add_argument("--jwt-secret", help="the --url server's JWT_SECRET, to mint sessions")
    parser.add_argument("--database-url", help="the --url server's DATABASE_URL, to count rows")
    parser.add_argument("--clients", type=int, default=50, help="contributors for --url")
    parser.add_argument("--pg-clients", type=int, default=50)
    parser.add_argument("--sqlite-clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--baseline-seconds", type=float, default=10.0)
    parser.add_argument(
        "--pg-admin-url",
        default=os.environ.get(
            "TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--pg-workers", default="1,2", help="worker counts to run PostgreSQL with (comma-separated)"
    )
    parser.add_argument("--only", choices=["postgres", "sqlite"], help="one own server only")
    args = parser.parse_args()

    if args.url:
        if not args.jwt_secret:
            parser.error("--url needs --jwt-secret (the server's JWT_SECRET)")
        phase, baseline, checks = run_phases(
            args.url.rstrip("/"),
            args.jwt_secret,
            args.clients,
            args.seconds,
            args.baseline_seconds,
            database_url=args.database_url,
            data_dir=None,
            log=None,
        )
        report("load", phase, baseline, checks)
        print(f"all_checks_pass: {passed(phase, checks)}")
        print(f"ratio: {fairness(phase):.2f}")
        return 0 if passed(phase, checks) else 1

    ok = True
    ratios: list[float] = []
    per_workers: dict[int, float] = {}
    if args.only in (None, "postgres"):
        for workers in [int(n) for n in args.pg_workers.split(",")]:
            with scratch_postgres(args.pg_admin_url) as pg_url:
                env = {"DATABASE_URL": pg_url, "REDIS_URL": args.redis_url}
                phase, baseline, checks = own_server_phases(args.pg_clients, args, env, workers)
            report(f"postgres_w{workers}", phase, baseline, checks)
            ok = ok and passed(phase, checks)
            ratios.append(fairness(phase))
            per_workers[workers] = (phase.requests - phase.error_count) / phase.seconds
    if args.only in (None, "sqlite"):
        phase, baseline, checks = own_server_phases(args.sqlite_clients, args, {})
        report("sqlite", phase, baseline, checks)
        ok = ok and passed(phase, checks)
        if not ratios:
            ratios.append(fairness(phase))
    if per_workers:
        side_by_side = ", ".join(f"{n} worker(s) {rps:.1f}" for n, rps in per_workers.items())
        print(f"postgres_requests_per_second_by_workers: {side_by_side}")
    print(f"all_checks_pass: {ok}")
    if ratios:
        print(f"ratio: {max(ratios):.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
