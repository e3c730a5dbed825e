"""Two processes seeding one empty store together: the first one's demo models stand."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import Model
from pipeline.models import registry
from pipeline.models.definitions import DEMO_MODELS, demo_model
from pipeline.store.objectstore import LocalObjectStore
from tests.support.threads import run_together


def test_a_second_seeding_of_the_same_empty_store_finds_the_first_ones_models(
    settings: Settings, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As when the preparation lock's session is lost: both find the store empty, then register.
    with db.session() as session:
        session.execute(delete(Model))
    both_found_it_empty = threading.Barrier(2, timeout=30)
    waited: set[int] = set()
    original = demo_model

    def demo_model_after_both_counted(name: str) -> Any:
        if threading.get_ident() not in waited:
            waited.add(threading.get_ident())
            both_found_it_empty.wait()
        return original(name)

    # Where the registry's seeding looks it up.
    monkeypatch.setattr(registry, "demo_model", demo_model_after_both_counted)
    store = LocalObjectStore(settings.objects_dir)
    results, errors = run_together(
        lambda: [m.name for m in registry.seed_demo_models(db, store)], 2
    )

    assert errors == []
    # The second found the store seeded (IntegrityError on the name, rolled back), or, when the
    # first had committed before it looked the names up, found the same models by name.
    demo = ["customer-churn", "loan-default"]
    assert demo in results and all(names in ([], demo) for names in results)
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Model)) == len(DEMO_MODELS)
