"""The dataset-version writer: all of a version or nothing of it, its number never reused."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import ArrivalEvent, DatasetVersion
from pipeline.intake.versions import VersionRecord, new_dataset_version
from pipeline.models.registry import allocate_version
from pipeline.store.objectstore import LocalObjectStore
from tests.support.scheduling import demo_model_id

RECORD = VersionRecord(kind="contribution", file_format="csv", row_count=1, columns=["a"])


def _objects(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


def _rows(db: Database) -> tuple[int, int]:
    with db.session() as session:
        versions = session.scalar(select(func.count()).select_from(DatasetVersion)) or 0
        events = session.scalar(select(func.count()).select_from(ArrivalEvent)) or 0
    return versions, events


def test_a_version_is_written_with_its_row_and_arrival_event(
    db: Database, settings: Settings
) -> None:
    store = LocalObjectStore(settings.objects_dir)
    model = demo_model_id(db)
    with new_dataset_version(db, store, model) as draft:
        draft.put_bytes(draft.key("manifest.json"), b"{}")
        data = draft.put_bytes(draft.key("rows.csv"), b"a\n1\n")
        with draft.recording(data, RECORD, local_queue=True) as (_, dataset):
            assert dataset.id is not None  # flushed: the caller's rows can point at it
    assert (draft.number, draft.version) == (1, "v1")
    assert _rows(db) == (1, 1)
    assert len(_objects(settings.objects_dir)) == 2


def test_a_failure_before_commit_deletes_every_object_and_leaves_a_gap(
    db: Database, settings: Settings
) -> None:
    store = LocalObjectStore(settings.objects_dir)
    model = demo_model_id(db)
    failing = pytest.raises(RuntimeError, match="injected")
    with failing, new_dataset_version(db, store, model) as draft:
        draft.put_bytes(draft.key("manifest.json"), b"{}")
        data = draft.put_bytes(draft.key("rows.csv"), b"a\n1\n")
        with draft.recording(data, RECORD, local_queue=True):
            raise RuntimeError("injected failure before commit")
    assert _rows(db) == (0, 0)
    assert _objects(settings.objects_dir) == []
    # The number may have been announced already: the next version gets the one after it.
    assert allocate_version(db, model) == (2, "v2")


def test_a_failed_delete_is_logged_and_the_original_failure_raised(
    db: Database, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    class StuckStore(LocalObjectStore):
        def delete(self, key: str) -> None:
            raise OSError("store unreachable")

    store = StuckStore(settings.objects_dir)
    failing = pytest.raises(RuntimeError, match="injected")
    with failing, new_dataset_version(db, store, demo_model_id(db)) as draft:
        draft.put_bytes(draft.key("rows.csv"), b"a\n1\n")
        raise RuntimeError("injected")
    assert "could not delete datasets/" in caplog.text
