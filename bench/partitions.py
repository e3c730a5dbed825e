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
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagster as dg
import httpx
import yaml
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID
from sqlalchemy import create_engine, insert, text, update
from sqlalchemy.pool import NullPool

from assets.partitions import EVALUATION_JOB, partition_key, retire_settled
from bench._server import free_port
from cli.operate import dagster_storage_url, render_dagster_yaml
from definitions import defs
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.migrate import upgrade
from pipeline.core.tables import Contribution, DatasetVersion, Model
from pipeline.models.registry import demo_definition, format_version, register_model
from pipeline.store.objectstore import StoredObject, dataset_key
from pipeline.store.queue import enqueue_local_arrival
from pipeline.triggers.retirement import settled_cutoff

ROOT = Path(__file__).resolve().parent.parent
SIZES = (1_000, 10_000, 100_000)
MODELS = 50
TICK_MODELS = 10
ARRIVALS_PER_TICK = 100
PARTITION_CHUNK = 10_000
EVENT_CHUNK = 2_000
ROW_CHUNK = 5_000
KEEP_HOURS = 24
SETTLED_AT = datetime.now(UTC) - timedelta(days=30)
PARTITIONS_DEF = "dataset_versions"
ASSET = "dataset_version"

# The asset page's partition query, as dagster-webserver 1.13's UI bundle sends it.
PARTITION_HEALTH_QUERY = """
query PartitionHealthQuery($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      id
      partitionKeysByDimension { name type partitionKeys }
      assetPartitionStatuses {
        ... on TimePartitionStatuses {
          ranges { status startTime endTime startKey endKey }
        }
        ... on DefaultPartitionStatuses {
          materializedPartitions
          materializingPartitions
          failedPartitions
        }
        ... on MultiPartitionStatuses {
          primaryDimensionName
          ranges {
            primaryDimStartKey primaryDimEndKey primaryDimStartTime primaryDimEndTime
            secondaryDim {
              ... on TimePartitionStatuses {
                ranges { status startTime endTime startKey endKey }
              }
              ... on DefaultPartitionStatuses {
                materializedPartitions materializingPartitions failedPartitions
              }
            }
          }
        }
      }
    }
  }
}
"""


# --- throwaway databases and Dagster processes --------------------------------------------------


def _with_database(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


@contextmanager
def throwaway_databases(admin_url: str) -> Iterator[tuple[str, str]]:
    """(marketplace URL, Dagster URL): two fresh databases, dropped on the way out."""
    tag = uuid.uuid4().hex[:10]
    names = [f"mk_bench_parts_{tag}", f"mk_bench_dagster_{tag}"]
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield _with_database(admin_url, names[0]), _with_database(admin_url, names[1])
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def dagster_home(home: Path, settings: Settings) -> None:
    """The production instance config, with the run queue held so queued runs never start."""
    rendered = render_dagster_yaml((ROOT / "dagster.postgres.yaml").read_text(), settings)
    config = yaml.safe_load(rendered)
    config["concurrency"]["runs"]["max_concurrent_runs"] = 0
    (home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (home / "workspace.yaml").write_text(
        yaml.safe_dump(
            {
                "load_from": [
                    {
                        "python_module": {
                            "module_name": "bench._dagster_defs",
                            "working_directory": str(ROOT),
                            "location_name": "marketplace",
                        }
                    }
                ]
            }
        )
    )


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        text_ = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text_[-lines:])


@contextmanager
def started(name: str, command: list[str], env: dict[str, str], logdir: Path) -> Iterator[Process]:
    """A Dagster process in its own session; its whole group is stopped on the way out."""
    log = logdir / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield Process(name, proc, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# --- registering versions -----------------------------------------------------------------------


@dataclass
class Registry:
    """What the bench has registered so far: models and each model's last version number."""

    db: Database
    instance: Any
    models: list[int] = field(default_factory=list)
    last: dict[int, int] = field(default_factory=dict)
    registered: int = 0

    def add_models(self) -> None:
        with self.db.session() as session:
            for i in range(MODELS):
                definition = demo_definition().model_copy(update={"name": f"bench-{i}"})
                self.models.append(register_model(session, definition).id)
        self.last = dict.fromkeys(self.models, 0)

    def _next(self, model_id: int) -> tuple[int, str]:
        self.last[model_id] += 1
        number = self.last[model_id]
        return number, format_version(number)

    def _save_last(self, session: Any) -> None:
        for model_id, number in self.last.items():
            session.execute(update(Model).where(Model.id == model_id).values(last_version=number))

    def register_settled(self, target: int) -> None:
        """Settled versions up to `target`: rows, partitions, one materialization each."""
        while self.registered < target:
            count = min(ROW_CHUNK, target - self.registered)
            items = []
            for i in range(count):
                model_id = self.models[(self.registered + i) % MODELS]
                number, version = self._next(model_id)
                items.append((model_id, number, version))
            with self.db.session() as session:
                ids = session.scalars(
                    insert(DatasetVersion).returning(
                        DatasetVersion.id, sort_by_parameter_order=True
                    ),
                    [_version_row(m, n, v, SETTLED_AT) for m, n, v in items],
                ).all()
                session.execute(
                    insert(Contribution),
                    [
                        {
                            "id": str(uuid.uuid4()), "model_id": m, "dataset_version_id": dv_id,
                            "submitter_id": "bench", "status": "rewarded", "reason": "bench",
                            "submitted_rows": 100, "created_at": SETTLED_AT,
                            "updated_at": SETTLED_AT,
                        }
                        for (m, _, _), dv_id in zip(items, ids, strict=True)
                    ],
                )  # fmt: skip
                self._save_last(session)
            keys = [partition_key(m, v) for m, _, v in items]
            for start in range(0, len(keys), PARTITION_CHUNK):
                self.instance.add_dynamic_partitions(
                    PARTITIONS_DEF, keys[start : start + PARTITION_CHUNK]
                )
            for start in range(0, len(keys), EVENT_CHUNK):
                store_materializations(self.instance, keys[start : start + EVENT_CHUNK])
            self.registered += count

    def enqueue_arrivals(self, count: int) -> None:
        """`count` uploads of the first TICK_MODELS models, as the API records them."""
        now = datetime.now(UTC)
        with self.db.session() as session:
            for i in range(count):
                model_id = self.models[i % TICK_MODELS]
                number, version = self._next(model_id)
                row = DatasetVersion(**_version_row(model_id, number, version, now))
                session.add(row)
                session.flush()
                session.add(
                    Contribution(
                        model_id=model_id, dataset_version_id=row.id, submitter_id="bench",
                        status="queued", submitted_rows=100, created_at=now, updated_at=now,
                    )
                )  # fmt: skip
                enqueue_local_arrival(session, StoredObject(row.object_key, row.uri, 10, "0" * 64))
            self._save_last(session)

    def run_partition(self) -> str:
        """The newest version of the last model: nothing pending, no benchmark, never retired."""
        model_id = self.models[-1]
        return partition_key(model_id, format_version(self.last[model_id]))


def _version_row(model_id: int, number: int, version: str, at: datetime) -> dict[str, Any]:
    key = dataset_key(model_id, version, "data.csv")
    return {
        "model_id": model_id, "version": version, "version_number": number,
        "kind": "contribution", "object_key": key, "uri": f"file:///bench/{key}",
        "file_format": "csv", "sha256": "0" * 64, "size_bytes": 10, "row_count": 100,
        "created_at": at,
    }  # fmt: skip


def store_materializations(instance: Any, keys: list[str]) -> None:
    """One `dataset_version` materialization per partition, in one batch write."""
    now = time.time()
    entries = [
        dg.EventLogEntry(
            user_message="", level=logging.INFO, job_name=RUNLESS_JOB_NAME,
            run_id=RUNLESS_RUN_ID, error_info=None, timestamp=now, step_key=None,
            dagster_event=DagsterEvent(
                event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
                job_name=RUNLESS_JOB_NAME,
                event_specific_data=StepMaterializationData(
                    dg.AssetMaterialization(dg.AssetKey(ASSET), partition=key)
                ),
            ),
        )
        for key in keys
    ]  # fmt: skip
    instance.event_log_storage.store_event_batch(entries)


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


class PartitionReads:
    """Rows of Dagster's `dynamic_partitions` table the server has read so far (sequential scans
    plus index entries read, index-only scans included): loading every partition key reads
    the whole table once.

    A backend that stays connected (the webserver keeps one) reports its statistics only after
    10 s idle (PostgreSQL's PGSTAT_IDLE_INTERVAL), so a reading waits that long and then takes a
    fresh snapshot.
    """

    def __init__(self, dagster_url: str) -> None:
        self.engine = create_engine(dagster_url, poolclass=NullPool)

    def __call__(self) -> int:
        time.sleep(11)
        with self.engine.connect() as conn:
            conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            value = conn.execute(
                text(
                    "SELECT coalesce(t.seq_tup_read, 0) + ("
                    " SELECT coalesce(sum(i.idx_tup_read), 0) FROM pg_stat_user_indexes i"
                    " WHERE i.relid = t.relid) "
                    "FROM pg_stat_user_tables t WHERE t.relname = 'dynamic_partitions'"
                )
            ).scalar_one()
        return int(value)


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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def graphql_once(url: str) -> tuple[float, int, dict[str, Any]]:
    start = time.perf_counter()
    response = httpx.post(
        f"{url}/graphql",
        json={"query": PARTITION_HEALTH_QUERY, "variables": {"assetKey": {"path": [ASSET]}}},
        timeout=600,
    )
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(f"GraphQL errors: {body['errors']}")
    return elapsed, len(response.content), body["data"]["assetNodeOrError"]


def wait_for_webserver(url: str, webserver: Process, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, _, node = graphql_once(url)
            if "partitionKeysByDimension" in node:
                return
        except (httpx.HTTPError, RuntimeError, KeyError, TypeError):
            pass
        if webserver.proc.poll() is not None:
            break
        time.sleep(1)
    raise RuntimeError(f"dagster-webserver did not serve the asset:\n{webserver.tail()}")


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


def counted(reads: PartitionReads, action: Any) -> tuple[Any, int]:
    """`action()` and the `dynamic_partitions` rows the server read meanwhile."""
    before = reads()
    value = action()
    return value, reads() - before


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
