"""Throwaway PostgreSQL databases and Dagster daemon/webserver processes for bench/partitions.py."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from sqlalchemy import create_engine, text

from cli.dagster_instance import render_dagster_yaml
from pipeline.core.config import Settings

ROOT = Path(__file__).resolve().parent.parent


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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
