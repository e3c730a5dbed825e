"""Store (issue 2 §3): migrations match the models; object stores write atomically."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from pipeline.core.db import Database
from pipeline.core.tables import Base
from pipeline.models.registry import allocate_version
from pipeline.store.objectstore import LocalObjectStore, S3ObjectStore, dataset_key


def test_migrations_create_exactly_the_models(database_url: str) -> None:
    db = Database(database_url)
    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    db.dispose()


def test_versions_are_monotonic_per_model(db: Database) -> None:
    numbers = [allocate_version(db, 1)[0] for _ in range(3)]
    assert numbers == [1, 2, 3]
    assert allocate_version(db, 1)[1] == "v4"


def test_dataset_key_layout() -> None:
    assert dataset_key(7, "v3", "rows.parquet") == "datasets/7/v3/rows.parquet"


def test_local_store_round_trip(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    stored = store.put_bytes("datasets/1/v1/a.csv", b"x,y\n1,2\n")
    assert stored.uri.startswith("file://") and stored.uri.endswith("datasets/1/v1/a.csv")
    assert stored.size_bytes == 8
    with store.open(stored.key) as fh:
        assert fh.read() == b"x,y\n1,2\n"
    store.delete(stored.key)
    assert not store.exists(stored.key)
    assert not (tmp_path / "objects" / "datasets" / "1").exists()


def test_local_store_failed_write_leaves_nothing(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    source = tmp_path / "src.bin"
    source.write_bytes(b"0" * 1000)

    class Boom(Exception):
        pass

    def failing_write(out) -> None:
        out.write(b"partial")
        raise Boom

    with pytest.raises(Boom):
        store._install("datasets/1/v1/data.csv", failing_write)
    folder = tmp_path / "objects" / "datasets" / "1" / "v1"
    assert not (folder / "data.csv").exists()
    assert [p.name for p in folder.iterdir()] == []


def test_local_store_refuses_keys_outside_root(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    with pytest.raises(ValueError):
        store.put_bytes("../escape.txt", b"x")


def test_s3_store_over_http(
    moto_endpoint: str, s3_resources: dict[str, str], tmp_path: Path
) -> None:
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    store = S3ObjectStore(s3_resources["bucket"], client)
    source = tmp_path / "data.csv"
    source.write_bytes(b"a,b\n" + b"1,2\n" * 1000)
    stored = store.put_file("datasets/1/v1/data.csv", source)
    assert stored.uri == f"s3://{s3_resources['bucket']}/datasets/1/v1/data.csv"
    assert store.size(stored.key) == source.stat().st_size
    with store.local_path(stored.key) as path:
        assert path.read_bytes() == source.read_bytes()
    small = store.put_bytes("datasets/1/v2/rows.parquet", b"PAR1")
    assert store.exists(small.key)
    store.delete(small.key)
    assert not store.exists(small.key)
    assert store.size("datasets/9/v9/none") is None


def test_local_store_moves_a_file_with_a_known_digest(tmp_path: Path) -> None:
    import hashlib

    store = LocalObjectStore(tmp_path / "objects")
    source = tmp_path / "upload.part"
    source.write_bytes(b"a,b\n1,2\n")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    stored = store.put_file("datasets/1/v1/data.csv", source, sha256=digest, move=True)
    assert not source.exists()
    assert stored.sha256 == digest and stored.size_bytes == 8
    with store.open(stored.key) as fh:
        assert fh.read() == b"a,b\n1,2\n"
