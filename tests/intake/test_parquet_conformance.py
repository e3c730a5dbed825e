"""apache/parquet-testing's files at the upload, the pipeline and the CLI (issue 33 cases 1, 10).

Encrypted files are refused with that reason, decided before pyarrow reads any metadata (pyarrow
26 aborts the whole process reading an encrypted column's metadata). A file that stops the
native reader anyway stops a child process, never the caller (`pipeline.store.parquet_probe`).
Well-formed files are read; the broken ones are refused with a reason. The files are vendored
under tests/vendor/parquet-testing (its README says from where).
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from cli.datafiles import RowFileError, read_rows
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.intake.profiles import profile_parquet
from pipeline.intake.sniffing import sniff_format
from pipeline.store import parquet_envelope, parquet_probe
from pipeline.store.parquet_probe import ParquetReaderFailed, check_parquet_file
from pipeline.store.reading import UnreadableDataset, read_dataset
from pipeline.store.thrift_compact import Struct, ThriftError, decode_struct
from tests.intake.test_uploads import assert_nothing_stored, upload

VENDOR = Path(__file__).resolve().parents[1] / "vendor" / "parquet-testing"
PLAINTEXT_FOOTER = [
    "data/encrypt_columns_plaintext_footer.parquet.encrypted",
    "data/aes256/encrypt_columns_plaintext_footer.parquet.encrypted",
]
ENCRYPTED_FOOTER = ["data/uniform_encryption.parquet.encrypted"]  # ends with PARE
ENCRYPTED = PLAINTEXT_FOOTER + ENCRYPTED_FOOTER
# Case 10: well-formed, refused before as "not a trustworthy Parquet file".
WELL_FORMED = {
    "data/column_chunk_key_value_metadata.parquet": 0,  # data_page_offset 0 on empty chunks
    "data/repeated_no_annotation.parquet": 6,  # the footer's file-level row count is 0
}
BROKEN = sorted(str(p.relative_to(VENDOR)) for p in (VENDOR / "bad_data").glob("*.parquet"))
READABLE = sorted(
    str(p.relative_to(VENDOR))
    for p in (VENDOR / "data").glob("*.parquet")
    # 2 rows of 1 GB strings each, in 4 KB: over the read budget, a real reason to refuse.
    if p.name != "large_string_map.brotli.parquet"
)


def vendored(name: str) -> Path:
    return VENDOR / name


@pytest.fixture
def owner_headers(platform_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform_key('admin', scopes=['benchmarks:write'])}"}


# Case 1: encrypted files.


@pytest.mark.parametrize("name", ENCRYPTED)
def test_an_encrypted_upload_is_400_and_stores_nothing(
    name: str, client: Any, owner_headers: dict[str, str], db: Database, settings: Settings
) -> None:
    response = upload(client, owner_headers, vendored(name).read_bytes(), "x.parquet")
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"detail"}
    assert response.json()["detail"].startswith("encrypted Parquet is not supported")
    assert_nothing_stored(db, settings)
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("name", ENCRYPTED)
def test_encryption_is_decided_before_pyarrow_reads_anything(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def native(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the native reader was reached")

    monkeypatch.setattr(pq, "ParquetFile", native)
    monkeypatch.setattr(parquet_probe, "_probe", native)
    with pytest.raises(InvalidInput, match=r"^encrypted Parquet is not supported \(its "):
        profile_parquet(vendored(name), None)


@pytest.mark.parametrize("name", ENCRYPTED)
def test_the_pipeline_and_the_cli_refuse_an_encrypted_file(name: str, tmp_path: Path) -> None:
    with pytest.raises(UnreadableDataset, match=r"^encrypted Parquet is not supported"):
        read_dataset(vendored(name), "parquet")
    copy = tmp_path / "rows.parquet"
    copy.write_bytes(vendored(name).read_bytes())
    with pytest.raises(RowFileError, match=r"rows.parquet: encrypted Parquet is not supported"):
        read_rows(copy, {"type": "object", "properties": {}})


def test_a_file_with_an_encrypted_footer_is_named_for_what_it_is() -> None:
    head = vendored(ENCRYPTED_FOOTER[0]).read_bytes()[:64]
    with pytest.raises(InvalidInput, match=r"^encrypted Parquet is not supported"):
        sniff_format(head, at_eof=False)
    # Text that starts with the same four letters is still CSV.
    assert sniff_format(b"PARENT_ID,score\n1,2\n", at_eof=True) == "csv"


def test_a_native_abort_stops_a_child_not_the_caller(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the envelope check, pyarrow aborts on the file (SIGABRT): in the child."""
    monkeypatch.setattr(parquet_probe, "check_parquet_envelope", lambda path: None)
    path = tmp_path / "x.parquet"
    path.write_bytes(vendored(PLAINTEXT_FOOTER[0]).read_bytes())
    with pytest.raises(ParquetReaderFailed, match=r"stopped on it \(signal 6\)"):
        check_parquet_file(path)
    with pytest.raises(Unprocessable, match=r"^not a trustworthy Parquet file: the Parquet reader"):
        profile_parquet(path, None)
    with pytest.raises(UnreadableDataset, match=r"^not a trustworthy PARQUET file: the Parquet"):
        read_dataset(path, "parquet")
    # The next file is read by a fresh child.
    check_parquet_file(vendored("data/alltypes_plain.parquet"))


def test_a_child_that_reads_too_long_is_stopped(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(vendored("data/delta_length_byte_array.parquet").read_bytes())
    with pytest.raises(ParquetReaderFailed, match="takes longer than"):
        check_parquet_file(path, seconds=1e-6)
    check_parquet_file(path)  # a new server for the next check


# Run as PID 1 of a container runs `marketplace serve`: a subreaper adopts orphaned grandchildren.
_ADOPTING_CALLER = """
import ctypes, os, pathlib, sys
import pyarrow as pa, pyarrow.parquet as pq
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
from pipeline.store.parquet_probe import ParquetReaderFailed, check_parquet_file
folder = pathlib.Path(sys.argv[1])
rows = 4_000_000
big = folder / "big.parquet"
pq.write_table(pa.table({"n": range(rows), "s": [str(i) for i in range(rows)]}), big)
for i in range(3):
    small = folder / f"small{i}.parquet"
    pq.write_table(pa.table({"a": [i]}), small)
    check_parquet_file(small)  # a server is ready: the slow file's child is forked in time
    slow = folder / f"slow{i}.parquet"  # a new file each time: a file read once is not again
    slow.write_bytes(big.read_bytes())
    try:
        check_parquet_file(slow, seconds=0.1)
    except ParquetReaderFailed as exc:
        print("refused:", exc)
children = pathlib.Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
stats = [pathlib.Path(f"/proc/{c}/stat").read_text() for c in children]
states = [stat.rsplit(")", 1)[1].split()[0] for stat in stats]
print("zombies:", states.count("Z"))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_a_child_stopped_at_its_deadline_is_reaped_by_its_server(tmp_path: Path) -> None:
    """The server stops and reaps its child at the deadline: the caller never kills a server
    with a child inside, whose orphan a container's PID 1 (the API) would keep as a zombie."""
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", _ADOPTING_CALLER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused: reading it takes longer than 0.1 s") == 3, done.stdout
    assert "zombies: 0" in done.stdout, done.stdout


def test_a_file_read_once_is_not_read_again_by_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    path = vendored("data/alltypes_plain.snappy.parquet")
    check_parquet_file(path)
    monkeypatch.setattr(parquet_probe, "_probe", lambda *args: pytest.fail("probed again"))
    check_parquet_file(path)
    read_dataset(path, "parquet")


def test_the_envelope_refuses_what_the_native_reader_mishandles(tmp_path: Path) -> None:
    data = vendored("data/alltypes_plain.parquet").read_bytes()
    cases = {
        "short": (data[:8], "too short"),
        "no-magic": (b"XXXX" + data[4:], "magic"),
        "footer-length": (data[:-8] + (2**31).to_bytes(4, "little") + b"PAR1", "length"),
        "footer-garbage": (data[:-40] + b"\xff" * 32 + data[-8:], "decoded|footer"),
    }
    for name, (content, reason) in cases.items():
        path = tmp_path / f"{name}.parquet"
        path.write_bytes(content)
        with pytest.raises(parquet_envelope.UnsafeParquet, match=reason):
            parquet_envelope.check_parquet_envelope(path)


# Case 10 and the rest of the corpus.


@pytest.mark.parametrize("name", sorted(WELL_FORMED))
def test_well_formed_files_are_read(name: str, client: Any, owner_headers: dict[str, str]) -> None:
    rows = WELL_FORMED[name]
    assert profile_parquet(vendored(name), None).row_count == rows
    assert len(read_dataset(vendored(name), "parquet")) == rows
    response = upload(client, owner_headers, vendored(name).read_bytes(), "x.parquet")
    # Refused for a real reason: too few rows and not the demo model's columns.
    assert response.status_code == 422, response.text
    assert f"the file has {rows} rows" in response.json()["detail"]
    assert "trustworthy" not in response.json()["detail"]


@pytest.mark.parametrize("name", READABLE)
def test_every_well_formed_file_reads_alike_at_upload_and_in_the_pipeline(name: str) -> None:
    profile = profile_parquet(vendored(name), None)
    assert len(read_dataset(vendored(name), "parquet")) == profile.row_count


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_file_is_refused_or_read_never_a_crash(name: str) -> None:
    try:
        profile = profile_parquet(vendored(name), None)
    except (InvalidInput, Unprocessable) as exc:
        assert exc.detail.startswith(("not a valid Parquet file", "not a trustworthy Parquet"))
        with pytest.raises(UnreadableDataset):
            read_dataset(vendored(name), "parquet")
    else:  # ARROW-GH-43605 was fixed in Arrow: it reads
        assert len(read_dataset(vendored(name), "parquet")) == profile.row_count


def test_the_python_footer_decoder_only_ever_raises_its_own_error() -> None:
    """Seeded garbage and mutated real footers: a Struct or a ThriftError, nothing else."""
    rng = random.Random(33)
    footer = vendored("data/alltypes_plain.parquet").read_bytes()
    length = int.from_bytes(footer[-8:-4], "little")
    real = footer[-8 - length : -8]
    samples = [rng.randbytes(rng.randrange(1, 200)) for _ in range(1000)]
    for _ in range(1000):
        mutated = bytearray(real)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        samples.append(bytes(mutated))
    for data in samples:
        with contextlib.suppress(ThriftError):
            assert isinstance(decode_struct(data), Struct)
    with pytest.raises(ThriftError, match="nest too deep"):  # not a RecursionError
        decode_struct(b"\x1c" * 100_000)  # a struct in a struct in a struct ...
    with pytest.raises(ThriftError, match="more items than"):  # not a huge allocation
        decode_struct(b"\x19\xfc\xff\xff\xff\xff\x0f")  # a list of 2^32 structs
