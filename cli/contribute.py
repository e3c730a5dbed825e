"""`marketplace contribute`: a file's rows validated, sent in batches, and followed to a reward.

Each batch is one contribution with an idempotency key derived from the file, so sending the
same file again (after a network failure, say) does not create new jobs.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path
from typing import Any

from rich.progress import MofNCompleteColumn, TextColumn

from cli.client import (
    CREDENTIAL_HINTS,
    FINAL_JOB_STATUSES,
    ClientError,
    MarketplaceClient,
    MissingCredential,
    RowsRejected,
)
from cli.connection import handles_errors, make_client
from cli.datafiles import RowFile, RowFileError, batches, read_rows
from cli.terminal import note, progress_bar, stderr_console
from cli.validate import file_errors
from pipeline.rewards.manifests import InvalidManifest, load_manifest_file

# Each batch is one contribution, checked on its own against spec §8 (at least 100 rows).
MIN_ROWS_PER_CONTRIBUTION = 100
DEFAULT_BATCH_SIZE = 1000


def batch_idempotency_key(model_id: int, file_digest: str, batch_count: int, index: int) -> str:
    """The same file, model and batching always give batch `index` the same key."""
    material = f"marketplace-contribute\n{model_id}\n{file_digest}\n{batch_count}\n{index}"
    return "mkc-" + hashlib.sha256(material.encode()).hexdigest()[:48]


def load_manifest(path: Path) -> dict[str, Any]:
    """Read and check a spec §2.5 manifest with the server's own check, naming every problem."""
    try:
        data = load_manifest_file(path)
    except FileNotFoundError:
        raise RowFileError(f"{path}: no such file") from None
    except InvalidManifest as exc:
        count = len(exc.problems)
        lines = "".join(f"\n  {problem}" for problem in exc.problems)
        raise ClientError(
            f"{path}: the manifest has {count} problem{'s' if count > 1 else ''}:{lines}"
        ) from None
    return data


def _progress_line(job: dict[str, Any] | None) -> str | None:
    """A job's status, with what it waits for while queued (the server says why)."""
    if job is None:
        return None
    if job["status"] == "queued" and job.get("reason"):
        return f"queued · {job['reason']}"
    return str(job["status"])


def _follow_jobs(
    client: MarketplaceClient, model_id: int, job_ids: list[str], poll: float, timeout: float
) -> dict[str, dict[str, Any]]:
    """Poll each job until it is rewarded, rejected or failed (or `timeout` seconds pass)."""
    deadline = time.monotonic() + timeout
    last: dict[str, dict[str, Any]] = {}
    pending = list(dict.fromkeys(job_ids))
    while pending:
        for job_id in list(pending):
            job = client.contribution(model_id, job_id)
            if _progress_line(last.get(job_id)) != _progress_line(job):
                note(f"job {job_id}: {_progress_line(job)}")
            last[job_id] = job
            if job["status"] in FINAL_JOB_STATUSES:
                pending.remove(job_id)
        if pending:
            if time.monotonic() >= deadline:
                break
            time.sleep(poll)
    return last


@handles_errors
def cmd_contribute(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise ClientError("--batch-size must be at least 1")
    manifest = load_manifest(Path(args.manifest))
    with make_client(args) as client:
        if not client.credentials.token:
            raise MissingCredential(CREDENTIAL_HINTS["session"])
        schema = client.data_spec(args.model_id)
        rowfile = read_rows(Path(args.file), schema)
        if not rowfile.rows:
            raise ClientError(f"{args.file}: no rows to send")
        errors = file_errors(schema, rowfile)
        if errors:
            for error in errors:
                print(f"{error.path}: {error.message}")
            failing = len({e.rowIndex for e in errors})
            print(f"{failing} of {len(rowfile.rows)} rows failed validation; nothing was sent")
            return 1
        spans = list(batches(len(rowfile.rows), args.batch_size))
        small = [stop - start for start, stop in spans if stop - start < MIN_ROWS_PER_CONTRIBUTION]
        if small:
            note(
                f"warning: {len(small)} batch(es) hold fewer than {MIN_ROWS_PER_CONTRIBUTION} "
                "rows; the pipeline rejects a contribution that small (spec §8)"
            )
        job_ids = _send_batches(client, args.model_id, rowfile, spans, manifest)
        if job_ids is None:
            return 1
        print("jobs: " + " ".join(dict.fromkeys(job_ids)))
        if not args.wait:
            return 0
        jobs = _follow_jobs(client, args.model_id, job_ids, args.poll_interval, args.wait_timeout)
    return _report_jobs(jobs, job_ids)


def _send_batches(
    client: MarketplaceClient,
    model_id: int,
    rowfile: RowFile,
    spans: list[tuple[int, int]],
    manifest: dict[str, Any],
) -> list[str] | None:
    job_ids: list[str] = []
    console = stderr_console()
    with progress_bar(console, MofNCompleteColumn(), TextColumn("rows")) as progress:
        task = progress.add_task("sending", total=len(rowfile.rows))
        for index, (start, stop) in enumerate(spans):
            key = batch_idempotency_key(model_id, rowfile.sha256, len(spans), index)
            try:
                accepted = client.submit_rows(
                    model_id, rowfile.rows[start:stop], manifest=manifest, idempotency_key=key
                )
            except RowsRejected as exc:
                progress.stop()
                for error in exc.errors:
                    print(f"{_offset_path(error, start)}: {error.get('message')}")
                print(f"batch {index + 1} was refused ({exc.detail}); batches after it not sent")
                return None
            job_ids.append(accepted["jobId"])
            progress.update(task, completed=stop)
            progress.console.print(
                f"batch {index + 1}/{len(spans)}: rows {start}–{stop - 1} "
                f"({accepted['submittedRows']} rows) job {accepted['jobId']}",
                markup=False,
            )
    return job_ids


def _offset_path(error: dict[str, Any], start: int) -> str:
    """A server path of a batch (`rows[j]…`) as a path of the whole file (`rows[start+j]…`)."""
    path = str(error.get("path", ""))
    index = error.get("rowIndex")
    prefix = f"rows[{index}]"
    if isinstance(index, int) and index >= 0 and path.startswith(prefix):
        return f"rows[{start + index}]" + path[len(prefix) :]
    return path


def _report_jobs(jobs: dict[str, dict[str, Any]], job_ids: list[str]) -> int:
    total = 0.0
    ok = True
    for job_id in dict.fromkeys(job_ids):
        job = jobs[job_id]
        tokens = job.get("tokens")
        total += float(tokens or 0)
        parts = [f"job {job_id}: {job['status']}"]
        if job.get("improvementPct") is not None:
            parts.append(f"improvement {job['improvementPct']:.4g} %")
        if tokens is not None:
            parts.append(f"{tokens:g} reward tokens")
        if job.get("reason"):
            parts.append(str(job["reason"]))
        print(" · ".join(parts))
        if job["status"] not in FINAL_JOB_STATUSES:
            ok = False
            note(f"job {job_id} is still {job['status']} (--wait-timeout reached)")
        elif job["status"] != "rewarded":
            ok = False
    print(f"reward tokens: {total:g}")
    return 0 if ok else 1
