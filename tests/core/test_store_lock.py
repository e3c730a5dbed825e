"""The SQLite side of the store preparation lock: which file it locks, and who may lock it.

(Waiting, nesting and the PostgreSQL lock: tests/cli/test_concurrent_store_preparation.py.)
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from pipeline.core.store_lock import LOCK_SUFFIX, sqlite_lock_path, store_preparation_lock

ROOT = Path(__file__).resolve().parents[2]
# Prepares as the service's user: root drops to nobody (after the imports, which live under
# root's home), as a container's service user meets a file `docker exec` (root) left.
AS_SERVICE_USER = """
import os, sys

from pipeline.core.store_lock import store_preparation_lock

if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
with store_preparation_lock(sys.argv[1]):
    print("held", flush=True)
"""


@pytest.fixture
def store_dir() -> Iterator[Path]:
    """A data dir every user can reach (tmp_path is root's alone when the tests run as root)."""
    path = Path(tempfile.mkdtemp(prefix="store-lock-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_a_read_only_lock_file_another_user_left_does_not_stop_preparation(
    store_dir: Path,
) -> None:
    database = store_dir / "marketplace.db"
    lock = sqlite_lock_path(str(database))
    lock.touch()
    lock.chmod(0o444)
    result = subprocess.run(
        [sys.executable, "-c", AS_SERVICE_USER, f"sqlite:///{database}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (0, "held\n"), result.stderr


def test_the_lock_file_is_readable_by_every_user_whatever_the_umask(tmp_path: Path) -> None:
    database = tmp_path / "marketplace.db"
    previous = os.umask(0o077)
    try:
        with store_preparation_lock(f"sqlite:///{database}"):
            pass
    finally:
        os.umask(previous)
    assert stat.S_IMODE(sqlite_lock_path(str(database)).stat().st_mode) == 0o644


@pytest.mark.parametrize(
    "query", ["file:x?mode=memory&uri=true", "file::memory:?uri=true", ":memory:", ""]
)
def test_an_in_memory_database_leaves_no_lock_file(
    query: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with store_preparation_lock(f"sqlite:///{query}"):
        pass
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "spelling",
    ["file:{path}", "file://{path}", "file://localhost{path}", "file:{quoted}?mode=rwc"],
)
def test_a_file_uri_locks_beside_the_file_sqlite_opens(
    spelling: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "my store" / "marketplace.db"
    database.parent.mkdir()
    uri = spelling.format(path=database, quoted=str(database).replace(" ", "%20"))
    url = f"sqlite:///{uri}{'&' if '?' in uri else '?'}uri=true"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)

    engine = create_engine(url)  # SQLite's own reading of the URI
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER)"))
    engine.dispose()
    assert database.exists()

    # The same lock as the file's plain path: taking that one inside it is nesting.
    with (
        store_preparation_lock(url),
        pytest.raises(RuntimeError, match="not re-entrant"),
        store_preparation_lock(f"sqlite:///{database}"),
    ):
        pass
    assert sorted(p.name for p in database.parent.iterdir()) == [
        "marketplace.db",
        "marketplace.db" + LOCK_SUFFIX,
    ]
    assert list(cwd.iterdir()) == []
