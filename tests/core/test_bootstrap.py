"""The composition root: no settings read at import, and one root behind every entry point.

Importing the code location, the sensors, the assets or the app must read no environment (a
bad value then fails where the runtime is built, with the message naming the variable), and a
setting pinned for the API, the assets' resource or the sensors' resource reaches the parts each
of them works with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from assets.resources import MarketplaceResource
from pipeline.bootstrap import prepare_store
from pipeline.core.config import load_settings
from pipeline.models.definitions import demo_definition
from pipeline.models.registry import list_models, register_model
from pipeline.services import Services
from sensors.resources import SensorStore

ROOT = Path(__file__).resolve().parents[2]

IMPORT_THEN_BUILD = """
import json, sys

from pipeline.core.config import ConfigError, get_settings

import definitions, sensors, assets, api.app  # must read no settings

result = {"settings_read_at_import": get_settings.cache_info().misses}
builders = {
    "definitions": lambda: definitions.defs(),
    "api": lambda: api.app.create_app(),
    "marketplace_resource": lambda: assets.RESOURCES["marketplace"].services,
    "sensor_store": lambda: sensors.RESOURCES["sensor_store"].open().__enter__(),
}
for name, build in builders.items():
    try:
        build()
        result[name] = "built"
    except ConfigError as exc:
        result[name] = str(exc)
print(json.dumps(result))
"""


def test_imports_read_no_settings_and_building_names_the_bad_one(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "MARKETPLACE_DATA_DIR": str(tmp_path / "data"),
        "ARRIVAL_POLL_INTERVAL_SECONDS": "often",
    }
    env.pop("DATABASE_URL", None)
    completed = subprocess.run(
        [sys.executable, "-c", IMPORT_THEN_BUILD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result.pop("settings_read_at_import") == 0
    for name, outcome in result.items():
        assert outcome.startswith("invalid configuration: ARRIVAL_POLL_INTERVAL_SECONDS"), name
    assert not (tmp_path / "data").exists()  # nothing was built


def test_code_location_load_follows_the_poll_intervals(monkeypatch: pytest.MonkeyPatch) -> None:
    import definitions

    monkeypatch.setenv("ARRIVAL_POLL_INTERVAL_SECONDS", "7")
    monkeypatch.setenv("SCHEDULER_POLL_INTERVAL_SECONDS", "11")
    sensors = definitions.defs().sensors
    assert sensors is not None
    by_name = {sensor.name: sensor for sensor in sensors}
    assert by_name["dataset_arrival_sensor"].minimum_interval_seconds == 7
    assert by_name["evaluation_schedule_sensor"].minimum_interval_seconds == 11


def test_a_pinned_data_dir_reaches_the_api_the_assets_and_the_sensors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_env, pinned = tmp_path / "from-env", tmp_path / "pinned"
    monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(from_env))
    for name in ("DATABASE_URL", "SERVICE_DATASET_BUCKET", "DATASET_ARRIVAL_SQS_QUEUE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(marketplace_data_dir=pinned)
    prepare_store(settings)

    app = create_app(settings)
    # Settings are pinned in code, never as resource config (assets/settings_resource.py).
    resource = MarketplaceResource.from_settings(settings)
    sensor_store = SensorStore.from_settings(settings)
    definition = demo_definition().model_copy(update={"name": "pinned-model"})
    try:
        # An object written by the API is read by the assets and by a sensor tick ...
        app.state.store.put_bytes("probe/one.bin", b"one store")
        with resource.services.db.session() as session:
            register_model(session, definition)
        assert resource.services.store.open("probe/one.bin").read() == b"one store"
        with sensor_store.open() as tick:
            assert tick.store.open("probe/one.bin").read() == b"one store"
            with tick.db.session() as session:
                names = {model.name for model in list_models(session)}
            # prepare_store registered both demo models in the fresh store.
            assert {"customer-churn", "loan-default", "pinned-model"} <= names
            assert tick.queue.source == "local"
        # ... and a model the assets registered is listed by the API: one database.
        with TestClient(app) as client:
            listed = {model["name"] for model in client.get("/api/models").json()}
        assert "pinned-model" in listed
    finally:
        app.state.services.close()
        resource.services.close()
    assert not from_env.exists()  # the environment's data dir was never used


def test_parts_given_are_used_and_kept_open(tmp_path: Path) -> None:
    settings = load_settings(marketplace_data_dir=tmp_path / "data")
    prepare_store(settings)
    with Services(settings) as owner:
        with Services(settings, db=owner.db, store=owner.store) as borrower:
            assert borrower.db is owner.db and borrower.store is owner.store
        # Closing the borrower left the owner's database usable.
        with owner.db.session() as session:
            assert list_models(session)
