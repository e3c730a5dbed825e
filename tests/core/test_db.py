"""The engine's SQLite file: created where SQLite opens it, whatever spelling the URL uses."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import text

from pipeline.core.db import make_engine
from tests.support.threads import run_together


@pytest.mark.parametrize(
    "spelling",
    [
        "{path}",
        "{path}?timeout=5",
        "file:{path}?uri=true",
        "file://{path}?uri=true",
        "file:{path}?mode=rwc&uri=true",
    ],
)
def test_the_database_folder_is_made_where_sqlite_opens_the_file(
    spelling: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "new folder" / "marketplace.db"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)

    engine = make_engine("sqlite:///" + spelling.format(path=database))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (id INTEGER)"))
            conn.execute(text("INSERT INTO t VALUES (1)"))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id FROM t")).scalar_one() == 1
    finally:
        engine.dispose()
    assert database.exists()
    # Nothing named after the URI's spelling ("file:..." folders, "db?timeout=5" files).
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in database.parent.iterdir() if "marketplace.db" not in p.name) == []


def test_an_in_memory_uri_makes_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    engine = make_engine("sqlite:///file:scratch?mode=memory&uri=true")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        engine.dispose()
    assert list(tmp_path.iterdir()) == []


def test_writers_of_a_shared_in_memory_database_queue_instead_of_failing() -> None:
    engine = make_engine("sqlite:///file:shared-writers?mode=memory&cache=shared&uri=true")
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (id INTEGER)"))

        def write() -> None:
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES (1)"))
                time.sleep(0.2)  # holds the write while the other thread comes

        _, errors = run_together(write, 2, timeout=30)
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT count(*) FROM t")).scalar_one()
    finally:
        engine.dispose()
    assert errors == []
    assert rows == 2
