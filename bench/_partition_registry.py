"""The versions bench/partitions.py registers: settled ones in bulk (rows, partitions and one
materialization each, written directly) and arrivals queued as the API records them."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID
from sqlalchemy import insert, update

from assets.partitions import partition_key
from pipeline.core.db import Database
from pipeline.core.tables import Contribution, DatasetVersion, Model
from pipeline.models.definitions import demo_definition
from pipeline.models.registry import format_version, register_model
from pipeline.store.objectstore import StoredObject, dataset_key
from pipeline.store.queue import enqueue_local_arrival

MODELS = 50
TICK_MODELS = 10
PARTITION_CHUNK = 10_000
EVENT_CHUNK = 2_000
ROW_CHUNK = 5_000
SETTLED_AT = datetime.now(UTC) - timedelta(days=30)
PARTITIONS_DEF = "dataset_versions"
ASSET = "dataset_version"


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
