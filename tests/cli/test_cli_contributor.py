"""Contributor commands (issue 6) against a live server: spec, validate, contribute, upload, keys.

Each test starts uvicorn on a free loopback port with a temp store and runs `marketplace …`
in-process, so the command's own HTTP client talks to the real server over TCP.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from cli.client import MarketplaceClient, RetryPolicy
from cli.contribute import batch_idempotency_key
from cli.datafiles import RowFileError, batches, convert_cell, read_rows
from pipeline.core.db import Database
from pipeline.core.tables import Contribution, DatasetVersion
from pipeline.demo.churn_data import churn_benchmark_rows, churn_rows
from tests.conftest import TEST_ADMIN_TOKEN

pytestmark = pytest.mark.slow

COLUMNS = [
    "tenure_months",
    "monthly_charges",
    "contract",
    "payment_method",
    "support_calls",
    "has_fiber",
    "churned",
]
WALLET = "0x52908400098527886E0F7030069857D2E4169EE7"
MANIFEST = {
    "contributor_id": "alice",
    "wallet_address": WALLET,
    "data_description": "Accounts from the March billing run",
    "data_source": "CRM export",
    "license": "CC-BY-4.0",
}


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    # Most commands are HTTP clients; the retried-batch test also runs on PostgreSQL.
    return str(request.param)


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MARKETPLACE_URL", "MARKETPLACE_TOKEN", "MARKETPLACE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("MARKETPLACE_ADMIN_TOKEN", raising=False)


def write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str] = COLUMNS) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for row in rows:
            cells = []
            for name in columns:
                value = row.get(name)
                cells.append(
                    ""
                    if value is None
                    else str(value).lower()
                    if isinstance(value, bool)
                    else value
                )
            writer.writerow(cells)
    return path


@pytest.fixture
def manifest_file(tmp_path: Path) -> Path:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(MANIFEST))
    return path


def _contributions(db: Database) -> list[Contribution]:
    with db.session() as session:
        return list(session.scalars(select(Contribution).order_by(Contribution.created_at)))


def _contribution_versions(db: Database) -> int:
    with db.session() as session:
        return len(
            list(
                session.scalars(select(DatasetVersion).where(DatasetVersion.kind == "contribution"))
            )
        )


# --- pure parts ----------------------------------------------------------------------------


def test_csv_cells_convert_to_the_types_the_data_spec_declares() -> None:
    assert convert_cell("14", {"type": "integer"}) == 14
    assert convert_cell("14.0", {"type": "integer"}) == 14
    assert convert_cell("79.85", {"type": "number"}) == 79.85
    assert convert_cell("true", {"type": "boolean"}) is True
    assert convert_cell("FALSE", {"type": "boolean"}) is False
    assert convert_cell("1", {"enum": [0, 1]}) == 1
    assert convert_cell('{"a": 1}', {"type": "object"}) == {"a": 1}
    assert convert_cell("", {"type": ["string", "null"]}) is None
    # Not convertible: stays text, and the validator reports it with the spec's message.
    assert convert_cell("abc", {"type": "integer"}) == "abc"
    assert convert_cell("nan", {"type": "number"}) == "nan"


def test_batches_are_nearly_equal_and_cover_every_row() -> None:
    assert list(batches(250, 100)) == [(0, 84), (84, 167), (167, 250)]
    assert list(batches(200, 100)) == [(0, 100), (100, 200)]
    assert list(batches(5, 100)) == [(0, 5)]
    assert list(batches(0, 100)) == []


def test_batch_keys_depend_on_file_model_batching_and_index() -> None:
    key = batch_idempotency_key(1, "ab" * 32, 3, 0)
    assert key == batch_idempotency_key(1, "ab" * 32, 3, 0)
    others = {
        batch_idempotency_key(2, "ab" * 32, 3, 0),
        batch_idempotency_key(1, "cd" * 32, 3, 0),
        batch_idempotency_key(1, "ab" * 32, 4, 0),
        batch_idempotency_key(1, "ab" * 32, 3, 1),
    }
    assert key not in others and len(others) == 4
    assert len(key) <= 200


# --- spec and validate ---------------------------------------------------------------------


def test_spec_prints_the_data_spec_and_writes_the_csv_template(
    run: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    status, out, _ = run("spec", "1")
    assert status == 0
    assert json.loads(out)["properties"]["contract"]["enum"][0] == "month-to-month"
    target = tmp_path / "template.csv"
    status, _, err = run("spec", "1", "--format", "csv", "-o", str(target))
    assert status == 0 and "wrote" in err
    assert target.read_text().splitlines()[0] == ",".join(COLUMNS)
    status, _, err = run("spec", "99")
    assert status == 1 and "HTTP 404" in err


def test_validate_accepts_a_good_csv_and_reports_quality(
    run: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    good = write_csv(tmp_path / "good.csv", churn_rows(150, seed=5))
    status, out, _ = run("validate", "1", str(good))
    assert status == 0, out
    assert "all 150 rows match model 1's data-spec" in out
    assert re.search(r"samples\s+150 rows \(at least 100\)\s+ok", out)
    assert "quality: passed" in out


def test_validate_prints_every_failing_row_with_server_paths(
    run: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    rows = churn_rows(120, seed=6)
    rows[3]["tenure_months"] = 500
    rows[7]["contract"] = "weekly"
    del rows[8]["churned"]
    rows[110]["support_calls"] = "many"
    bad = write_csv(tmp_path / "bad.csv", rows)
    status, out, _ = run("validate", "1", str(bad))
    assert status == 1
    lines = out.splitlines()
    assert "rows[3].tenure_months: 500 is greater than the maximum of 120" in lines
    assert any(line.startswith("rows[7].contract: 'weekly' is not one of") for line in lines)
    assert "rows[8].churned: 'churned' is a required property" in lines
    assert "rows[110].support_calls: 'many' is not of type 'integer'" in lines
    assert "4 of 120 rows failed validation against model 1's data-spec" in lines
    assert re.search(r"schema compliance\s+4 failing rows \(at most 0\)\s+FAIL", out)


def test_validate_reads_parquet_and_jsonl_and_checks_thresholds(
    run: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = churn_rows(60, seed=7)
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    status, out, _ = run("validate", "1", str(parquet))
    assert status == 1  # valid rows, but fewer than the 100 samples spec §8 asks for
    assert "all 60 rows match" in out
    assert re.search(r"samples\s+60 rows \(at least 100\)\s+FAIL", out)

    lines = [json.dumps(row) for row in rows[:3]] + ['{"tenure_months": -1}', "not json"]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    status, out, _ = run("validate", "1", str(jsonl), "--no-quality")
    assert status == 1
    assert "rows[3].tenure_months: -1 is less than the minimum of 0" in out
    assert "rows[4]: is not valid JSON" in out
    assert "quality" not in out


# --- contribute ----------------------------------------------------------------------------


def _drop_first_contribution_response(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first contribution POST reaches the server, then the client loses the answer."""
    dropped: list[str] = []
    original = httpx.HTTPTransport.handle_request

    def flaky(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        response = original(self, request)
        if request.method == "POST" and request.url.path.endswith("/contributions") and not dropped:
            response.read()
            response.close()
            dropped.append(request.headers["Idempotency-Key"])
            raise httpx.ReadError("connection reset after the server answered", request=request)
        return response

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", flaky)
    return dropped


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_contribute_retries_a_lost_batch_and_the_server_stores_it_once(
    run: Callable[..., tuple[int, str, str]],
    tmp_path: Path,
    manifest_file: Path,
    session_token: Callable[..., str],
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = write_csv(tmp_path / "rows.csv", churn_rows(240, seed=8))
    dropped = _drop_first_contribution_response(monkeypatch)
    token = session_token("alice")
    args = ("contribute", "1", str(data), "--manifest", str(manifest_file), "--batch-size", "120")
    status, out, err = run(*args, "--token", token)
    assert status == 0, err
    assert dropped, "the first batch's answer was not dropped"
    assert "retrying" in err and "ReadError" in err
    assert "sending" in err and "240/240" in err
    job_ids = out.strip().splitlines()[-1].removeprefix("jobs: ").split()
    assert len(job_ids) == 2

    jobs = _contributions(db)
    assert sorted(job.id for job in jobs) == sorted(job_ids)
    assert [job.submitted_rows for job in jobs] == [120, 120]
    assert _contribution_versions(db) == 2
    assert {job.idempotency_key for job in jobs} >= {dropped[0]}

    # Running the whole command again stores nothing new and names the same jobs.
    status, out, _ = run(*args, "--token", token)
    assert status == 0
    assert out.strip().splitlines()[-1].removeprefix("jobs: ").split() == job_ids
    assert len(_contributions(db)) == 2
    assert _contribution_versions(db) == 2


def test_contribute_wait_follows_jobs_to_their_reward(
    run: Callable[..., tuple[int, str, str]],
    tmp_path: Path,
    manifest_file: Path,
    session_token: Callable[..., str],
    db: Database,
) -> None:
    data = write_csv(tmp_path / "rows.csv", churn_rows(200, seed=9))
    args = ("contribute", "1", str(data), "--manifest", str(manifest_file), "--batch-size", "100")
    token = session_token("alice")
    status, out, _ = run(*args, "--token", token)
    assert status == 0
    job_ids = out.strip().splitlines()[-1].removeprefix("jobs: ").split()
    # What the pipeline would do: one job rewarded, then the other too.
    with db.session() as session:
        session.execute(
            update(Contribution)
            .where(Contribution.id == job_ids[0])
            .values(status="rewarded", improvement_pct=5.0, tokens=2.5)
        )
        session.execute(
            update(Contribution)
            .where(Contribution.id == job_ids[1])
            .values(status="rewarded", improvement_pct=2.5, tokens=1.25)
        )
    status, out, err = run(*args, "--token", token, "--wait", "--poll-interval", "0.1")
    assert status == 0, err
    assert f"job {job_ids[0]}: rewarded · improvement 5 % · 2.5 reward tokens" in out
    assert "reward tokens: 3.75" in out

    with db.session() as session:
        session.execute(
            update(Contribution)
            .where(Contribution.id == job_ids[1])
            .values(status="rejected", tokens=None, reason="no improvement")
        )
    status, out, _ = run(*args, "--token", token, "--wait", "--poll-interval", "0.1")
    assert status == 1
    assert f"job {job_ids[1]}: rejected · improvement 2.5 % · no improvement" in out


def test_contribute_refuses_bad_manifests_invalid_rows_and_missing_tokens(
    run: Callable[..., tuple[int, str, str]],
    tmp_path: Path,
    manifest_file: Path,
    session_token: Callable[..., str],
    db: Database,
) -> None:
    rows = churn_rows(120, seed=10)
    good = write_csv(tmp_path / "good.csv", rows)
    token = session_token("alice")

    bad_manifest = tmp_path / "shares.json"
    shares = [
        {"id": "a", "wallet_address": WALLET, "weight": 0.6},
        {"id": "b", "wallet_address": "0x" + "1" * 40, "weight": 0.3},
    ]
    bad_manifest.write_text(json.dumps({**MANIFEST, "contributors": shares}))
    status, _, err = run(
        "contribute", "1", str(good), "--manifest", str(bad_manifest), "--token", token
    )
    assert status == 1 and "weights must sum to 1" in err

    bad_wallet = tmp_path / "wallet.json"
    bad_wallet.write_text(json.dumps({**MANIFEST, "wallet_address": "0x1234"}))
    status, _, err = run(
        "contribute", "1", str(good), "--manifest", str(bad_wallet), "--token", token
    )
    assert status == 1 and "wallet" in err

    incomplete = tmp_path / "incomplete.json"
    incomplete.write_text(json.dumps({"wallet_address": "0x1234", "license": "WTFPL-9"}))
    status, _, err = run(
        "contribute", "1", str(good), "--manifest", str(incomplete), "--token", token
    )
    assert status == 1
    assert f"{incomplete}: the manifest has 5 problems:" in err
    for named in ("contributor_id: Field required", "wallet_address: wallet address must be",
                  "data_description: Field required", "data_source: Field required",
                  "license: unknown license identifier"):  # fmt: skip
        assert f"\n  {named}" in err

    rows[4]["monthly_charges"] = 9999
    bad_rows = write_csv(tmp_path / "bad.csv", rows)
    status, out, _ = run(
        "contribute", "1", str(bad_rows), "--manifest", str(manifest_file), "--token", token
    )
    assert status == 1
    assert "rows[4].monthly_charges: 9999 is greater than the maximum of 500" in out
    assert "nothing was sent" in out

    status, _, err = run("contribute", "1", str(good), "--manifest", str(manifest_file))
    assert status == 2 and "MARKETPLACE_TOKEN" in err and "marketplace token --user" in err
    assert _contributions(db) == []


def test_client_retries_transient_statuses_with_backoff() -> None:
    answers = iter([503, 502, 202])
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Idempotency-Key"))
        status = next(answers)
        if status != 202:
            return httpx.Response(status, json={"detail": "busy"}, headers={"Retry-After": "0"})
        return httpx.Response(202, json={"ok": True, "submittedRows": 1, "jobId": "j1"})

    waits: list[float] = []
    client = MarketplaceClient(
        url="http://marketplace.test",
        timeout=5,
        retry=RetryPolicy(attempts=4),
        sleep=waits.append,
        transport=httpx.MockTransport(handler),
    )
    client.credentials.token = "t"
    accepted = client.submit_rows(1, [{"a": 1}], idempotency_key="k-1")
    assert accepted["jobId"] == "j1"
    assert seen == ["k-1", "k-1", "k-1"]
    assert waits == [0.0, 0.0]


# --- upload and keys -----------------------------------------------------------------------


def test_upload_streams_the_file_with_progress_and_prints_the_result(
    run: Callable[..., tuple[int, str, str]],
    tmp_path: Path,
    platform_key: Callable[..., str],
) -> None:
    rows = churn_benchmark_rows(1500, seed=3)
    path = write_csv(tmp_path / "bench.csv", rows, columns=list(rows[0]))
    size = path.stat().st_size
    assert size > 64 * 1024  # several chunks
    key = platform_key("admin", scopes=["benchmarks:write"])  # the demo model's owner
    status, out, err = run(
        "upload", "1", str(path), "--api-key", key, "--target-column", "churned",
        "--metric-name", "accuracy", "--eval-split", "test",
    )  # fmt: skip
    assert status == 0, err
    result = json.loads(out)
    assert set(result) == {"s3_uri", "sha256_hash", "spec_id", "filename", "file_size_bytes"}
    assert result["file_size_bytes"] == size
    assert result["filename"] == "bench.csv"
    assert "uploading bench.csv" in err
    kilobytes = f"{size / 1000:.1f}"
    assert f"{kilobytes}/{kilobytes} kB" in err

    status, _, err = run("upload", "1", str(path))
    assert status == 2 and "MARKETPLACE_API_KEY" in err
    tiny = write_csv(tmp_path / "tiny.csv", rows[:10], columns=list(rows[0]))
    status, _, err = run("upload", "1", str(tiny), "--api-key", key, "--target-column", "churned")
    assert status == 1 and "HTTP 422" in err


def test_keys_create_list_rotate_revoke(run: Callable[..., tuple[int, str, str]]) -> None:
    admin = ("--admin-token", TEST_ADMIN_TOKEN)
    status, out, err = run(
        "keys", "create", "--name", "ci uploads", "--service-id", "platform",
        "--scope", "benchmarks:write", "--rate-limit-per-hour", "500", *admin,
    )  # fmt: skip
    assert status == 0, err
    full_key = out.strip().splitlines()[-1]
    key_id = re.search(r"^key_id: (\S+)$", out, re.MULTILINE).group(1)  # type: ignore[union-attr]
    assert "shown only now" in err
    assert "scopes: benchmarks:write" in out

    status, out, _ = run("keys", "list", *admin)
    assert status == 0
    assert key_id in out and full_key not in out
    assert out.splitlines()[0].startswith("key_id\tname\tkey_prefix")

    status, out, err = run("keys", "rotate", key_id, *admin)
    assert status == 0
    new_key = out.strip().splitlines()[-1]
    new_id = re.search(r"^key_id: (\S+)$", out, re.MULTILINE).group(1)  # type: ignore[union-attr]
    assert new_key != full_key and new_id != key_id
    status, out, _ = run("keys", "list", "--active-only", *admin)
    assert new_id in out and key_id not in out

    status, out, _ = run("keys", "revoke", new_id, *admin)
    assert status == 0 and "revoked" in out
    status, out, _ = run("keys", "list", "--active-only", "--json", *admin)
    assert json.loads(out) == []

    status, _, err = run("keys", "list")
    assert status == 2 and "MARKETPLACE_ADMIN_TOKEN" in err
    status, _, err = run("keys", "list", "--admin-token", "wrong")
    assert status == 1 and "HTTP 401" in err


def test_read_rows_reports_ragged_csv_lines(tmp_path: Path) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text("tenure_months,contract\n1,one-year\n2\n3,two-year,extra\n")
    schema = {"properties": {"tenure_months": {"type": "integer"}, "contract": {"type": "string"}}}
    rowfile = read_rows(path, schema)
    assert rowfile.rows[0] == {"tenure_months": 1, "contract": "one-year"}
    assert rowfile.problems == [
        (1, "has 1 cells, the header names 2 columns"),
        (2, "has 3 cells, the header names 2 columns"),
    ]


def test_read_rows_refuses_text_after_a_closing_quote_as_the_server_does(tmp_path: Path) -> None:
    # A backslash-escaped quote is no escape in RFC 4180: Python's csv glued the rest to the
    # value ('some \\escaped\\" value"'); the server refuses the file (issue 33 §9).
    path = tmp_path / "escaped.csv"
    path.write_text('tenure_months,contract\n1,one-year\n2,"some \\"escaped\\" value"\n')
    schema = {"properties": {"tenure_months": {"type": "integer"}, "contract": {"type": "string"}}}
    with pytest.raises(RowFileError, match="not a valid CSV file on line 3"):
        read_rows(path, schema)
    # Bare-CR line ends and a quote inside an unquoted field read as the server reads them.
    path.write_bytes(b'tenure_months,contract\r1,12" pipe\r2,"a ""b"""\r')
    assert read_rows(path, schema).rows == [
        {"tenure_months": 1, "contract": '12" pipe'},
        {"tenure_months": 2, "contract": 'a "b"'},
    ]


def test_upload_reports_progress_while_the_body_streams(tmp_path: Path) -> None:
    path = tmp_path / "bench.csv"
    path.write_bytes(b"a,b\n" + b"1,2\n" * 60_000)  # 240 kB: several 64 kB chunks
    size = path.stat().st_size
    seen: list[int] = []
    lengths: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        lengths.append(request.headers.get("Content-Length"))
        request.read()
        return httpx.Response(201, json={"filename": "bench.csv", "file_size_bytes": size})

    client = MarketplaceClient(
        url="http://marketplace.test", transport=httpx.MockTransport(handler)
    )
    client.credentials.api_key = "k"
    result = client.upload_benchmark(1, path, {"target_column": "b"}, on_progress=seen.append)
    assert result["file_size_bytes"] == size
    assert lengths[0] is not None and int(lengths[0]) > size  # sized, not chunked
    middle = [done for done in seen if 0 < done < size]
    assert len(middle) >= 3, seen
    assert middle == sorted(middle)
    assert seen[-1] == size
