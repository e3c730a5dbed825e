"""Hostile and malformed files never take the service down (issue 9 §2).

Real Parquet files of scikit-learn's breast-cancer data, written by pyarrow, with their footers
rewritten (tests/support/hostile_parquet.py) to claim 10^12 rows, twice the rows they hold, bytes
past their end, or statistics that lie. Each is refused at benchmark upload (422, nothing stored)
and fails the pipeline's readability check (the job is rejected), with bounded memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.datasets import load_breast_cancer
from sqlalchemy import func, select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.core.tables import BenchmarkSpec, Contribution, DatasetVersion
from pipeline.intake import profiles
from pipeline.intake.profiles import profile_parquet
from pipeline.intake.receiving import upload_tmp_root
from pipeline.store.bounded_read import (
    DatasetBoundsError,
    ReadBudget,
    check_parquet_footer,
    read_csv_table,
    read_parquet_table,
)
from pipeline.store.reading import UnreadableDataset, read_dataset
from tests.support.hostile_parquet import (
    FILE_NUM_ROWS,
    RG_NUM_ROWS,
    Struct,
    claim_bytes,
    claim_rows,
    column_meta,
    hostile_parquet,
    parquet_bytes,
    rewrite_footer,
    row_groups,
)

REPO = Path(__file__).resolve().parents[2]
TRILLION = 10**12


def cancer_table() -> pa.Table:
    frame = load_breast_cancer(as_frame=True).frame
    return pa.Table.from_pandas(frame, preserve_index=False)


def double_the_rows(metadata: Struct) -> None:
    """A plausible lie: every row group (and the file) claims twice the rows it holds."""
    groups = row_groups(metadata)
    for group in groups:
        group.set(RG_NUM_ROWS, 2 * group.get(RG_NUM_ROWS))
    metadata.set(FILE_NUM_ROWS, sum(g.get(RG_NUM_ROWS) for g in groups))


def file_rows_only(metadata: Struct) -> None:
    """Only the file-level count lies; the row groups tell the truth."""
    metadata.set(FILE_NUM_ROWS, TRILLION)


HOSTILE: dict[str, Callable[[Struct], None]] = {
    "trillion-rows": claim_rows(TRILLION),
    "trillion-rows-footer-only": claim_rows(TRILLION, values_too=False),
    # Within what the footer check allows: only counting the rows read refuses it.
    "ten-million-rows": claim_rows(10**7),
    "double-rows": double_the_rows,
    "file-count-only": file_rows_only,
    "bytes-past-the-end": claim_bytes(10**12),
    "a-few-bytes-past-the-end": claim_bytes(4096),
}


@pytest.fixture(params=sorted(HOSTILE))
def hostile(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return hostile_parquet(
        tmp_path / f"{request.param}.parquet",
        cancer_table(),
        HOSTILE[request.param],
        row_group_size=200,  # three row groups: 200, 200, 169 rows
    )


def test_the_footer_codec_rewrites_nothing_when_asked_nothing() -> None:
    data = parquet_bytes(cancer_table(), row_group_size=200)
    assert rewrite_footer(data, lambda metadata: None) == data
    lied = rewrite_footer(data, claim_rows(TRILLION))
    footer = pq.ParquetFile(pa.BufferReader(lied)).metadata
    assert footer.num_rows == 3 * TRILLION
    assert footer.row_group(0).num_rows == TRILLION


# --- the reader -------------------------------------------------------------------------------


def test_honest_files_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "honest.parquet"
    path.write_bytes(parquet_bytes(cancer_table(), row_group_size=100))
    table = read_parquet_table(path)
    assert table.num_rows == 569 and table.num_columns == 31
    assert read_dataset(path, "parquet").equals(load_breast_cancer(as_frame=True).frame)


def test_every_hostile_footer_is_refused(hostile: Path) -> None:
    with pytest.raises(DatasetBoundsError) as raised:
        read_parquet_table(hostile)
    message = str(raised.value)
    assert "claims" in message or "beyond" in message
    with pytest.raises(UnreadableDataset, match=r"^not a trustworthy PARQUET file: "):
        read_dataset(hostile, "parquet")


def test_impossible_claims_are_refused_before_any_data_page_is_read(tmp_path: Path) -> None:
    path = hostile_parquet(tmp_path / "t.parquet", cancer_table(), claim_rows(TRILLION))
    metadata = pq.ParquetFile(path).metadata
    with pytest.raises(DatasetBoundsError, match="more than it can hold"):
        check_parquet_footer(metadata, path.stat().st_size, ReadBudget.for_file(1000))


def test_the_row_count_is_what_the_row_groups_hold(tmp_path: Path) -> None:
    path = hostile_parquet(
        tmp_path / "d.parquet", cancer_table(), double_the_rows, row_group_size=200
    )
    with pytest.raises(DatasetBoundsError, match=r"row group 0 claims 400 rows .* holds 200"):
        read_parquet_table(path)


def test_decoding_beyond_the_budget_stops(tmp_path: Path) -> None:
    """A file that is honest but expands too much: the budget, not the footer, stops it."""
    path = tmp_path / "zeros.parquet"
    zeros = pa.table({"x": pa.array([0] * 200_000, pa.int64())})  # 1.6 MB decoded
    pq.write_table(zeros, path, row_group_size=50_000)
    assert path.stat().st_size < 20_000
    assert read_parquet_table(path).num_rows == 200_000  # within the default budget
    with pytest.raises(DatasetBoundsError, match="decodes to more than 1,000,000 bytes"):
        read_parquet_table(path, ReadBudget(1_000_000))


def test_csv_is_held_to_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    load_breast_cancer(as_frame=True).frame.to_csv(path, index=False)
    assert read_csv_table(path).num_rows == 569
    with pytest.raises(DatasetBoundsError, match="decodes to more than"):
        read_csv_table(path, ReadBudget(10_000))
    assert ReadBudget.for_file(path.stat().st_size).max_decoded_bytes >= 9 * path.stat().st_size


# --- benchmark upload: 422, nothing stored --------------------------------------------------


def upload(client: Any, headers: dict[str, str], data: bytes, name: str) -> Any:
    return client.post(
        "/api/v1/benchmarks/upload/1",
        headers=headers,
        files={"file": (name, data)},
        data={"target_column": "target"},
    )


def test_hostile_benchmark_upload_is_422_and_stores_nothing(
    client: Any,
    db: Database,
    settings: Settings,
    platform_key: Callable[..., str],
    hostile: Path,
) -> None:
    headers = {"Authorization": f"Bearer {platform_key('admin')}"}  # the demo model's owner
    response = upload(client, headers, hostile.read_bytes(), "bench.parquet")
    assert response.status_code == 422, response.text
    assert set(response.json()) == {"detail"}
    assert response.json()["detail"].startswith("not a trustworthy Parquet file")
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(BenchmarkSpec)) == 0
        assert session.scalar(select(func.count()).select_from(DatasetVersion)) == 0
    objects = settings.objects_dir
    assert not objects.exists() or not [p for p in objects.rglob("*") if p.is_file()]
    tmp = upload_tmp_root(settings)
    assert not tmp.exists() or list(tmp.iterdir()) == []

    honest = parquet_bytes(cancer_table(), row_group_size=200)
    assert upload(client, headers, honest, "bench.parquet").status_code == 201


def test_footer_statistics_do_not_fill_an_empty_column(tmp_path: Path) -> None:
    """An all-null column whose statistics claim no nulls is still seen as empty."""
    table = cancer_table().append_column("empty", pa.array([None] * 569, pa.int64()))

    def no_nulls(metadata: Struct) -> None:
        for group in row_groups(metadata):
            empty = column_meta(group)[-1]
            stats: Struct = empty.get(12)  # ColumnMetaData.statistics
            stats.set(3, 0)  # Statistics.null_count

    path = hostile_parquet(tmp_path / "s.parquet", table, no_nulls)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(31)
    assert chunk.statistics.null_count == 0  # the footer lies ...
    profile = profile_parquet(path, None)
    assert "empty" not in profile.filled  # ... and is not believed
    assert profile.row_count == 569


def test_upload_profile_refuses_as_unprocessable(hostile: Path) -> None:
    with pytest.raises(Unprocessable, match="not a trustworthy Parquet file"):
        profile_parquet(hostile, None)


# --- the pipeline: a failed readability check -------------------------------------------------


def test_a_hostile_external_file_fails_the_readability_check(
    settings: Settings, db: Database
) -> None:
    from pipeline.checks.batch import describe_batch, readability_outcomes
    from pipeline.core.tables import REJECTED
    from pipeline.evaluation.claims import claim_batch
    from pipeline.services import Services
    from pipeline.store.objectstore import LocalObjectStore
    from tests.support.pipeline import add_external

    store = LocalObjectStore(settings.objects_dir)
    data = parquet_bytes(cancer_table(), row_group_size=200)
    version = add_external(
        db,
        store,
        rewrite_footer(data, claim_rows(TRILLION)),
        filename="rows.parquet",
        file_format="parquet",
    )
    svc = Services(settings, db=db, store=store)
    batch = claim_batch(svc, 1, version, trigger="arrival")
    outcomes = readability_outcomes(describe_batch(svc, batch))
    assert [o.passed for o in outcomes] == [False]
    assert "not a trustworthy PARQUET file" in outcomes[0].summary
    with db.session() as session:
        job = session.scalar(select(Contribution).where(Contribution.submitter_id == "external"))
    assert job is not None and job.status == REJECTED
    assert (job.reason or "").startswith("unreadable dataset: not a trustworthy PARQUET file")
    assert "3,000,000,000,000 rows" in (job.reason or "")


# --- bounded memory, measured in a separate process ------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path

    # An address-space cap: an attempt to allocate what the footer claims fails at once
    # instead of growing until the kernel kills the process.
    cap = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    sys.path.insert(0, sys.argv[3])
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.core.errors import DomainError
    from pipeline.intake.profiles import profile_parquet
    from pipeline.store.reading import UnreadableDataset, read_dataset

    path = Path(sys.argv[1])
    out = {}
    try:
        profile_parquet(path, None)
        out["upload"] = "accepted"
    except DomainError as exc:
        out["upload"] = type(exc).__name__ + ": " + exc.detail
    try:
        read_dataset(path, "parquet")
        out["pipeline"] = "read"
    except UnreadableDataset as exc:
        out["pipeline"] = str(exc)
    out["arrow_peak_bytes"] = pa.default_memory_pool().max_memory()
    # What trusting the footer does: pyarrow sizes its buffers from the claimed row count.
    try:
        pq.read_table(path)
        out["naive"] = "read"
    except MemoryError as exc:
        out["naive"] = type(exc).__name__
    print(json.dumps(out))
    """
)


def test_both_paths_refuse_a_trillion_row_claim_with_bounded_memory(tmp_path: Path) -> None:
    path = hostile_parquet(tmp_path / "t.parquet", cancer_table(), claim_rows(TRILLION))
    assert path.stat().st_size < 200_000
    cap = 3 * 1024**3
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(cap), str(REPO)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["upload"].startswith("Unprocessable: not a trustworthy Parquet file")
    assert out["pipeline"].startswith("not a trustworthy PARQUET file")
    assert out["arrow_peak_bytes"] < 16 * 1024 * 1024
    assert out["naive"] in {"ArrowMemoryError", "MemoryError"}  # the file is truly hostile


def test_a_readable_row_count_is_reported_for_an_honest_multi_group_file(tmp_path: Path) -> None:
    path = tmp_path / "honest.parquet"
    frame = load_breast_cancer(as_frame=True).frame
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=50)
    profile = profile_parquet(path, None)
    assert profile.row_count == 569
    assert set(profile.filled) == set(frame.columns)
    assert isinstance(read_dataset(path, "parquet"), pd.DataFrame)


@pytest.mark.parametrize(
    "message",
    [
        "Integer value 18446744073709551615 not in range: 0 to 9223372036854775807",
        "Couldn't deserialize thrift: near 'jane.doe@example.com'",
        "Failed to parse 'jane.doe@example.com' as a timestamp",
    ],
)
def test_a_parquet_refusal_says_what_failed_without_quoting_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, message: str
) -> None:
    # pyarrow's messages may quote a cell; the refusal names the failure in words of its own.
    path = tmp_path / "t.parquet"
    pq.write_table(cancer_table(), path)

    def failing(*_: Any, **__: Any) -> Iterator[pa.RecordBatch]:
        raise pa.ArrowInvalid(message)

    monkeypatch.setattr(profiles, "iter_parquet_batches", failing)
    with pytest.raises(InvalidInput) as refused:
        profile_parquet(path, None)

    reason = str(refused.value)
    assert reason.startswith("not a valid Parquet file: ")
    assert "18446744073709551615" not in reason and "jane.doe" not in reason

    monkeypatch.undo()
    data = path.read_bytes()
    footer = int.from_bytes(data[-8:-4], "little")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(data[: -8 - footer] + b"\xff" * footer + data[-8:])
    with pytest.raises(InvalidInput, match=r"^not a valid Parquet file: its metadata cannot be"):
        profile_parquet(junk, None)
