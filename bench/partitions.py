"""Benchmark: Dagster with 1,000, 10,000 and 100,000 dataset-version partitions on PostgreSQL.

    python bench/partitions.py               # 1,000, 10,000 and 100,000 versions
    python bench/partitions.py --max 10000   # a quick run: 1,000 and 10,000

Every dataset version is one partition of the `dataset_versions` dynamic partitions definition.
The bench creates two throwaway databases on the PostgreSQL server of `--pg-admin-url` (trust
auth on 127.0.0.1:5432 by default): one for Dagster's instance (dagster-postgres, the repo's
dagster.postgres.yaml with the run queue held at `max_concurrent_runs: 0`, so requested runs
are created and queued but never start) and one for the marketplace. It starts
`dagster-daemon run` and `dagster-webserver` on that instance, with the code location
`bench/_dagster_defs.py` (the project's assets, job, resources and real arrival sensor, ticking
every second), and drops both databases at the end.

At each size it first registers versions up to the size: settled contributions (`rewarded`
30 days ago) spread over 50 models, each version one partition (added in chunks of 10,000
with `add_dynamic_partitions`) with one materialization of the `dataset_version` asset (what
the run that processed it recorded). Then it times:

  tick     the arrival sensor's tick as the daemon records it (end - start in Dagster's own
           tick history): 100 arrivals waiting in the embedded queue for 10 models and a
           debounce window of 0, so each tick records 100 arrivals, adds 100 partitions and
           creates and queues 10 evaluation runs (a busy tick; the bench deletes those runs
           afterwards). Median of --ticks ticks.
  run      one run of the evaluation job for one partition, in process on the same instance:
           the five assets and three checks all execute; the model has nothing pending and no
           benchmark, so the steps train nothing (Dagster's own work plus a few queries).
           Median of --repeat runs after a warm-up.
  graphql  PartitionHealthQuery, the query the asset page sends for its partitions (copied from
           the webserver's bundle), for `dataset_version`, over HTTP to dagster-webserver: the
           first call (cold status cache) and the median of --repeat calls after it.

Each size also reports how many rows of Dagster's `dynamic_partitions` table PostgreSQL read
for one tick, one run and one query (its own statistics): a figure near a multiple of the
partition count means that action loads every partition key.

At the largest size it then retires the settled partitions with the code of
`marketplace partitions retire` (keep window 24 hours; every registered version settled 30 days
ago, only each model's newest and the arrivals of the tick phase stay), vacuums Dagster's
partitions table (as autovacuum soon would) and times the three again (`*_after_retire`).

Prints `figure: value` lines; `growth_X` = X's time at the largest size ÷ at 1,000 for the
tick, the run and the query; and, last, `ratio: X` = the largest of those growths, i.e. that of
the figure slowing down the most with the partition count (named by `slowest:`).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagster as dg
from sqlalchemy import create_engine, text

from assets.partitions import EVALUATION_JOB, retire_settled
from bench._asset_page import PartitionReads, counted, graphql_once, wait_for_webserver
from bench._dagster_processes import (
    Process,
    cpu_seconds,
    dagster_home,
    started,
    throwaway_databases,
)
from bench._partition_registry import TICK_MODELS, Registry
from bench._server import free_port
from cli.dagster_instance import dagster_storage_url
from definitions import defs
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.migrate import upgrade
from pipeline.triggers.retirement import settled_cutoff

SIZES = (1_000, 10_000, 100_000)
ARRIVALS_PER_TICK = 100
KEEP_HOURS = 24


def vacuum(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("VACUUM ANALYZE dynamic_partitions"))
    engine.dispose()


# --- the three measurements ---------------------------------------------------------------------


def sensor_state(instance: Any, name: str, timeout: float, daemon: Process) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for state in instance.all_instigator_state():
            if state.instigator_name == name:
                return state
        if daemon.proc.poll() is not None:
            break
        time.sleep(0.5)
    raise RuntimeError(f"the daemon never ticked {name}:\n{daemon.tail()}")


def busy_tick(registry: Registry, state: Any, daemon: Process, timeout: float = 180) -> float:
    """Queue ARRIVALS_PER_TICK arrivals, wait for the tick that takes them; its duration (s)."""
    before = time.time()
    registry.enqueue_arrivals(ARRIVALS_PER_TICK)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ticks = registry.instance.get_ticks(
            state.instigator_origin_id, state.selector_id, after=before - 1, limit=20
        )
        for tick in ticks:
            if tick.end_timestamp is None or len(tick.run_ids) != TICK_MODELS:
                continue
            added = sum(
                len(result.added_partitions or [])
                for result in tick.tick_data.dynamic_partitions_request_results
            )
            if added != ARRIVALS_PER_TICK:
                raise RuntimeError(f"tick added {added} partitions, not {ARRIVALS_PER_TICK}")
            # In production these runs would start and finish; held in the queue they would
            # stay "in progress" and the asset page would look each of them up on every load.
            for run_id in tick.run_ids:
                registry.instance.delete_run(run_id)
            return float(tick.end_timestamp - tick.timestamp)
        if daemon.proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"no tick took the queued arrivals:\n{daemon.tail()}")


def run_once(instance: Any, partition_key: str) -> float:
    job = defs().get_job_def(EVALUATION_JOB)
    start = time.perf_counter()
    result = job.execute_in_process(
        partition_key=partition_key,
        instance=instance,
        run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
    )
    elapsed = time.perf_counter() - start
    if not result.success:
        raise RuntimeError(f"the run for {partition_key} failed")
    return elapsed


@dataclass
class Figures:
    partitions: int
    tick_s: float
    run_s: float
    graphql_cold_s: float
    graphql_s: float
    graphql_cpu_s: float
    graphql_bytes: int
    materialized: int
    reads: dict[str, int]


def measure(
    registry: Registry,
    state: Any,
    daemon: Process,
    url: str,
    webserver: Process,
    reads: PartitionReads,
    ticks: int,
    repeat: int,
) -> Figures:
    (cold, _, _), cold_rows = counted(reads, lambda: graphql_once(url))
    cpu_before = cpu_seconds(webserver.proc.pid)
    warm = [graphql_once(url) for _ in range(repeat)]
    graphql_cpu = (cpu_seconds(webserver.proc.pid) - cpu_before) / repeat
    (_, size, node), graphql_rows = counted(reads, lambda: graphql_once(url))
    [dimension] = node["partitionKeysByDimension"]
    materialized = len(node["assetPartitionStatuses"]["materializedPartitions"])

    busy_tick(registry, state, daemon)  # warm-up: the code server's first evaluation
    tick_times = [busy_tick(registry, state, daemon) for _ in range(ticks)]
    _, tick_rows = counted(reads, lambda: busy_tick(registry, state, daemon))

    key = registry.run_partition()
    run_once(registry.instance, key)  # warm-up: imports, first connections
    run_times = [run_once(registry.instance, key) for _ in range(repeat)]
    _, run_rows = counted(reads, lambda: run_once(registry.instance, key))
    return Figures(
        partitions=len(dimension["partitionKeys"]),
        tick_s=statistics.median(tick_times),
        run_s=statistics.median(run_times),
        graphql_cold_s=cold,
        graphql_s=statistics.median(t for t, _, _ in warm),
        graphql_cpu_s=graphql_cpu,
        graphql_bytes=size,
        materialized=materialized,
        reads={
            "tick": tick_rows,
            "run": run_rows,
            "graphql_cold": cold_rows,
            "graphql": graphql_rows,
        },
    )


def print_figures(label: str, figures: Figures) -> None:
    print(f"partitions_{label}: {figures.partitions}")
    print(f"materialized_partitions_{label}: {figures.materialized}")
    print(f"tick_ms_{label}: {figures.tick_s * 1000:.0f}")
    print(f"run_ms_{label}: {figures.run_s * 1000:.0f}")
    print(f"graphql_cold_ms_{label}: {figures.graphql_cold_s * 1000:.0f}")
    print(f"graphql_ms_{label}: {figures.graphql_s * 1000:.0f}")
    print(f"graphql_webserver_cpu_ms_{label}: {figures.graphql_cpu_s * 1000:.0f}")
    print(f"graphql_bytes_{label}: {figures.graphql_bytes}")
    for what, rows in figures.reads.items():
        print(f"partition_rows_read_per_{what}_{label}: {rows}")
    sys.stdout.flush()


# --- main ---------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max", type=int, default=SIZES[-1], help="stop at this many versions (default 100000)"
    )
    parser.add_argument(
        "--pg-admin-url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL role that may create and drop databases",
    )
    parser.add_argument("--ticks", type=int, default=3, help="busy ticks timed per size")
    parser.add_argument("--repeat", type=int, default=3, help="runs and queries timed per size")
    parser.add_argument("--retire-threads", type=int, default=4, help="parallel deletes")
    return parser.parse_args()


def prepare_environment(tmp: Path, market_url: str, dagster_url: str) -> Path:
    """Settings and Dagster pointed at the throwaway databases, migrated; the Dagster home."""
    home = tmp / "dagster"
    home.mkdir()
    env_settings = {
        "DATABASE_URL": market_url,
        "MARKETPLACE_DATA_DIR": str(tmp / "data"),
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_URL": dagster_storage_url(dagster_url),
        "EVALUATION_DEBOUNCE_WINDOW_SECONDS": "0",
        "ENABLE_EVALUATION_SCHEDULER": "false",
        "PIPELINE_LOG_LEVEL": "WARNING",
    }
    for name in ("SERVICE_DATASET_BUCKET", "DATASET_ARRIVAL_SQS_QUEUE_URL", "S3_ENDPOINT_URL"):
        os.environ.pop(name, None)
    os.environ.update(env_settings)
    dagster_home(home, Settings())
    upgrade(market_url)
    return home


def retire(registry: Registry, dagster_url: str, threads: int) -> None:
    """Retire the settled partitions with the code of `marketplace partitions retire`."""
    start = time.perf_counter()
    retired, looked_at = retire_settled(
        registry.instance,
        registry.db,
        settled_before=settled_cutoff(datetime.now(UTC), KEEP_HOURS),
        limit=sys.maxsize,
        threads=threads,
    )
    retire_s = time.perf_counter() - start
    # Deleted rows stay in the table as dead tuples that scans still visit until a
    # vacuum; autovacuum would do this within a minute or so of a mass delete.
    vacuum(dagster_url)
    print(f"retired_partitions: {retired}")
    print(f"retire_looked_at: {looked_at}")
    print(f"retire_s: {retire_s:.1f}")
    print(f"retire_per_s: {retired / retire_s:.0f}")


def run_with_dagster(
    registry: Registry, home: Path, tmp: Path, dagster_url: str, sizes: list[int], args: Any
) -> dict[int, Figures]:
    """Under the real daemon and webserver: the figures at each size, then after retiring."""
    env = dict(os.environ)
    bin_dir = Path(sys.executable).parent
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    workspace = str(home / "workspace.yaml")
    results: dict[int, Figures] = {}
    daemon_command = [str(bin_dir / "dagster-daemon"), "run", "-w", workspace]
    webserver_command = [
        str(bin_dir / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port), "-w", workspace,
    ]  # fmt: skip
    with (
        started("daemon", daemon_command, env, tmp) as daemon,
        started("webserver", webserver_command, env, tmp) as webserver,
    ):
        registry.register_settled(1)
        wait_for_webserver(url, webserver)
        state = sensor_state(registry.instance, "dataset_arrival_sensor", 180, daemon)
        reads = PartitionReads(dagster_url)

        def measure_now() -> Figures:
            return measure(registry, state, daemon, url, webserver, reads, args.ticks, args.repeat)

        for size in sizes:
            start = time.perf_counter()
            registry.register_settled(size)
            register_s = time.perf_counter() - start
            results[size] = measure_now()
            print(f"register_s_{size}: {register_s:.1f}")
            print_figures(str(size), results[size])

        retire(registry, dagster_url, args.retire_threads)
        print_figures("after_retire", measure_now())
    return results


def print_growth(first: Figures, last: Figures) -> None:
    """Each figure's growth from the smallest size to the largest; `ratio:` the largest one."""
    growth = {
        name.removesuffix("_s"): getattr(last, name) / getattr(first, name)
        for name in ("tick_s", "run_s", "graphql_s")
    }
    for name, value in growth.items():
        print(f"growth_{name}: {value:.2f}")
    worst = max(growth, key=lambda name: growth[name])
    print(f"slowest: {worst}")
    print(f"ratio: {growth[worst]:.2f}")


def main() -> int:
    args = parse_args()
    sizes = [size for size in SIZES if size <= args.max] or [args.max]
    logging.basicConfig(level=logging.WARNING)
    with (
        throwaway_databases(args.pg_admin_url) as (market_url, dagster_url),
        tempfile.TemporaryDirectory(prefix="mk-bench-partitions-") as tmp,
    ):
        home = prepare_environment(Path(tmp), market_url, dagster_url)
        instance = dg.DagsterInstance.get()
        registry = Registry(Database(market_url), instance)
        registry.add_models()
        results = run_with_dagster(registry, home, Path(tmp), dagster_url, sizes, args)
        instance.dispose()
        registry.db.dispose()
    print_growth(results[sizes[0]], results[sizes[-1]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
