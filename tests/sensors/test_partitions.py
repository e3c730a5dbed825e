"""Retiring the Dagster partitions of settled dataset versions (docs/scale.md): which versions are
settled (both databases), the paged walk over a real Dagster instance, the retirement sensor
and `marketplace partitions retire`."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from sqlalchemy import select

from assets.partitions import (
    PARTITIONS_DEF_NAME,
    delete_partitions,
    parse_partition_key,
    partition_key,
    plan_retirement,
    retire_settled,
)
from pipeline.core.config import Settings, get_settings
from pipeline.core.db import Database
from pipeline.core.tables import BenchmarkSpec, Contribution, DatasetVersion, Evaluation, utcnow
from pipeline.triggers.retirement import settled_cutoff, settled_versions
from sensors.partitions import make_retirement_sensor
from sensors.resources import SENSOR_STORE, SensorStore
from tests.support.scheduling import add_benchmark, add_version, demo_model_id

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Versions:
    """One model's versions in every state that matters, and the time they were made at."""

    model_id: int
    now: datetime
    settled: list[str]  # final 30 days ago, in version order
    recent: str  # final an hour ago: inside the 24-hour window
    unsettled: list[str]  # may still run
    newest: str  # final 30 days ago, but the model's last version

    @property
    def all(self) -> list[str]:
        return sorted(
            [*self.settled, self.recent, *self.unsettled, self.newest], key=lambda v: int(v[1:])
        )

    def keys(self, versions: list[str]) -> list[str]:
        return [partition_key(self.model_id, v) for v in versions]


def _job(db: Database, model_id: int, version: str, status: str, at: datetime) -> None:
    with db.session() as session:
        row = session.scalar(
            select(DatasetVersion).where(
                DatasetVersion.model_id == model_id, DatasetVersion.version == version
            )
        )
        assert row is not None
        session.add(
            Contribution(
                model_id=model_id, dataset_version_id=row.id, submitter_id="alice",
                status=status, submitted_rows=100, created_at=at, updated_at=at,
            )
        )  # fmt: skip


def _benchmark_version(db: Database, model_id: int, scored_at: datetime | None) -> str:
    spec_id = add_benchmark(db, model_id)
    with db.session() as session:
        spec = session.get(BenchmarkSpec, spec_id)
        assert spec is not None
        dataset = session.get(DatasetVersion, spec.dataset_version_id)
        assert dataset is not None
        if scored_at is not None:
            session.add(
                Evaluation(
                    model_id=model_id, dataset_version_id=dataset.id, benchmark_spec_id=spec_id,
                    trigger="manual", metric_name="accuracy",
                    metric_direction="higher_is_better", score=0.9, created_at=scored_at,
                )
            )  # fmt: skip
        return dataset.version


@pytest.fixture
def versions(db: Database) -> Versions:
    model = demo_model_id(db)
    now = utcnow()
    old, hour_ago = now - timedelta(days=30), now - timedelta(hours=1)

    def contribution(status: str, at: datetime) -> str:
        version = add_version(db, model, kind="contribution")
        _job(db, model, version, status, at)
        return version

    rewarded = contribution("rewarded", old)
    queued = contribution("queued", old)
    rejected = contribution("rejected", old)
    recent = contribution("rewarded", hour_ago)
    evaluating = contribution("evaluating", old)
    failed = contribution("failed", old)
    scored_benchmark = _benchmark_version(db, model, scored_at=old)
    unscored_benchmark = _benchmark_version(db, model, scored_at=None)
    external = add_version(db, model, kind="external")  # no job opened yet
    validating = contribution("validating", old)
    newest = contribution("rewarded", old)
    return Versions(
        model_id=model,
        now=now,
        settled=[rewarded, rejected, failed, scored_benchmark],
        recent=recent,
        unsettled=[queued, evaluating, unscored_benchmark, external, validating],
        newest=newest,
    )


# --- which versions are settled -----------------------------------------------------------------


def test_settled_versions_are_final_outside_the_window_and_not_the_newest(
    db: Database, versions: Versions
) -> None:
    m = versions.model_id
    asked = [(m, v) for v in versions.all] + [(m, "v999"), (m + 1000, "v1")]
    cutoff = settled_cutoff(versions.now, 24)
    with db.session() as session:
        assert settled_versions(session, asked, cutoff) == {(m, v) for v in versions.settled}
        # A keep window of 0 hours lets the version that settled an hour ago go too.
        with_recent = settled_versions(session, asked, settled_cutoff(versions.now, 0))
        assert with_recent == {(m, v) for v in [*versions.settled, versions.recent]}
        assert settled_versions(session, [], cutoff) == set()


def test_a_second_job_still_moving_keeps_the_version(db: Database, versions: Versions) -> None:
    m, version = versions.model_id, versions.settled[0]
    _job(db, m, version, "queued", versions.now)
    with db.session() as session:
        settled = settled_versions(session, [(m, version)], settled_cutoff(versions.now, 24))
    assert settled == set()


# --- the walk over a real Dagster instance ------------------------------------------------------


def _register(instance: dg.DagsterInstance, versions: Versions) -> list[str]:
    keys = [*versions.keys(versions.all), "hand-made", partition_key(versions.model_id, "v999")]
    instance.add_dynamic_partitions(PARTITIONS_DEF_NAME, keys)
    return keys


def test_plan_finds_the_settled_partitions_in_order(
    db: Database, versions: Versions, instance: dg.DagsterInstance
) -> None:
    keys = _register(instance, versions)
    plan = plan_retirement(
        instance, db, settled_before=settled_cutoff(versions.now, 24), limit=100, page_size=4
    )
    assert plan.keys == versions.keys(versions.settled)
    assert plan.scanned == len(keys)
    assert plan.finished and plan.cursor is None  # walked to the end; next time from the start


def test_small_passes_retire_every_settled_partition_once_and_keep_history(
    db: Database, versions: Versions, instance: dg.DagsterInstance
) -> None:
    keys = _register(instance, versions)
    settled = versions.keys(versions.settled)
    instance.report_runless_asset_event(
        dg.AssetMaterialization("dataset_version", partition=settled[0])
    )
    cutoff = settled_cutoff(versions.now, 24)

    # One per pass over pages of three: the first page holds two settled keys, so the cursor
    # has to stay before it for the second to be found on the next pass.
    retired: list[str] = []
    cursor: str | None = None
    for _ in range(20):
        plan = plan_retirement(
            instance, db, settled_before=cutoff, limit=1, cursor=cursor, page_size=3
        )
        assert len(plan.keys) <= 1
        assert delete_partitions(instance, plan.keys, threads=2) == len(plan.keys)
        retired += plan.keys
        if plan.finished and not plan.keys:
            break
        cursor = plan.cursor
    else:
        pytest.fail("the passes never came to an end")

    assert retired == settled
    assert instance.get_dynamic_partitions(PARTITIONS_DEF_NAME) == [
        key for key in keys if key not in settled
    ]
    # The run history of a retired partition stays in the event log.
    records = instance.fetch_materializations(dg.AssetKey("dataset_version"), limit=10).records
    assert [record.partition_key for record in records] == [settled[0]]


def test_plan_stops_when_its_time_budget_is_spent(
    db: Database, versions: Versions, instance: dg.DagsterInstance
) -> None:
    _register(instance, versions)
    clock = itertools.chain([0.0], itertools.repeat(100.0))
    plan = plan_retirement(
        instance, db, settled_before=settled_cutoff(versions.now, 24), limit=100, page_size=3,
        time_budget_seconds=5, monotonic=lambda: next(clock),
    )  # fmt: skip
    assert plan.scanned == 3
    assert plan.cursor is not None and not plan.finished  # the next pass goes on after page 1
    assert plan.keys == [
        k for k in versions.keys(versions.all[:3]) if k in versions.keys(versions.settled)
    ]


# --- the sensor ---------------------------------------------------------------------------------


def _tick(
    sensor: dg.SensorDefinition,
    store: SensorStore,
    instance: dg.DagsterInstance,
    cursor: str | None,
) -> dg.SensorResult:
    with dg.build_sensor_context(
        cursor=cursor, instance=instance, resources={SENSOR_STORE: store}
    ) as context:
        result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def test_sensor_asks_the_daemon_to_delete_settled_partitions_tick_by_tick(
    settings: Settings, db: Database, versions: Versions, instance: dg.DagsterInstance
) -> None:
    _register(instance, versions)
    store = SensorStore.from_settings(settings, partition_retire_per_tick=3)
    sensor = make_retirement_sensor(clock=lambda: versions.now)
    deleted: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        result = _tick(sensor, store, instance, cursor)
        cursor = result.cursor
        if not result.dynamic_partitions_requests:
            break
        [request] = result.dynamic_partitions_requests
        assert isinstance(request, dg.DeleteDynamicPartitionsRequest)
        assert request.partitions_def_name == PARTITIONS_DEF_NAME
        assert 0 < len(request.partition_keys) <= 3
        for key in request.partition_keys:  # what the daemon does with the request
            instance.delete_dynamic_partition(PARTITIONS_DEF_NAME, key)
        deleted += request.partition_keys
    assert deleted == versions.keys(versions.settled)
    assert result.skip_reason is not None and "no settled partition" in str(result.skip_reason)

    # PARTITION_KEEP_HOURS=0: what settled an hour ago goes on the next tick.
    eager = SensorStore.from_settings(settings, partition_keep_hours=0)
    requests = _tick(sensor, eager, instance, None).dynamic_partitions_requests
    assert requests is not None
    [request] = requests
    assert list(request.partition_keys) == versions.keys([versions.recent])


def test_sensor_is_off_with_zero_per_tick(
    settings: Settings, versions: Versions, instance: dg.DagsterInstance
) -> None:
    _register(instance, versions)
    store = SensorStore.from_settings(settings, partition_retire_per_tick=0)
    result = _tick(make_retirement_sensor(clock=lambda: versions.now), store, instance, None)
    assert result.dynamic_partitions_requests == []
    assert result.skip_reason is not None and "PARTITION_RETIRE_PER_TICK" in str(result.skip_reason)


# --- marketplace partitions retire --------------------------------------------------------------


@pytest.fixture
def cli_env(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """DAGSTER_HOME with the repo's SQLite instance config; settings from the environment."""
    home = tmp_path / "dagster-home"
    home.mkdir()
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(settings.data_dir))
    monkeypatch.delenv("DAGSTER_PG_URL", raising=False)
    get_settings.cache_clear()
    yield home
    get_settings.cache_clear()


def _partitions(home: Path) -> list[str]:
    with dg.DagsterInstance.from_config(str(home)) as loaded:
        return list(loaded.get_dynamic_partitions(PARTITIONS_DEF_NAME))


def test_cli_retire_counts_then_retires(
    cli_env: Path, versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    with dg.DagsterInstance.from_config(str(cli_env)) as loaded:
        keys = _register(loaded, versions)
    settled = versions.keys(versions.settled)

    assert main(["partitions", "retire", "--dry-run"]) == 0
    assert f"would retire {len(settled)} partition(s)" in capsys.readouterr().out
    assert _partitions(cli_env) == keys

    assert main(["partitions", "retire", "--limit", "1"]) == 0
    assert "retired 1 partition(s)" in capsys.readouterr().out
    assert _partitions(cli_env) == [k for k in keys if k != settled[0]]

    assert main(["partitions", "retire", "--keep-hours", "0", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    assert f"retired {len(settled)} partition(s)" in out  # three left + the recent one
    gone = {*settled, *versions.keys([versions.recent])}
    assert _partitions(cli_env) == [k for k in keys if k not in gone]
    assert all(
        parse_partition_key(k)[1] in {*versions.unsettled, versions.newest, "v999"}
        for k in _partitions(cli_env)
        if k != "hand-made"
    )


def test_cli_retire_without_an_instance_says_so(
    cli_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cli.main import main

    empty = tmp_path / "no-instance"
    empty.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(empty))
    assert main(["partitions", "retire"]) == 2
    assert "no Dagster instance" in capsys.readouterr().err
    assert not (empty / "dagster.yaml").exists()  # a maintenance command writes no config


def test_a_full_first_page_is_not_the_end_of_the_walk(
    db: Database, versions: Versions, instance: dg.DagsterInstance
) -> None:
    _register(instance, versions)
    cutoff = settled_cutoff(versions.now, 24)
    # The first page (v1..v3) holds two settled versions; a pass may take one.
    plan = plan_retirement(instance, db, settled_before=cutoff, limit=1, page_size=3)
    assert plan.keys == versions.keys(versions.settled[:1])
    assert plan.cursor is None and not plan.finished  # the next pass walks page 1 again
    retired, looked_at = retire_settled(instance, db, settled_before=cutoff, limit=100)
    assert retired == len(versions.settled)
    assert looked_at == len(versions.all) + 2
