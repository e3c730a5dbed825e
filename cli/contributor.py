"""Contributor subcommands over HTTP: spec, validate, contribute, upload and keys.

They talk to a running server (`--url`, else MARKETPLACE_URL, else http://127.0.0.1:8000) and
fetch the model's data-spec at run time, so a file is checked against the same JSON Schema,
with the same `rows[<i>].<field>` paths, as the server would use. Results go to stdout,
progress and notes to stderr. Exit status: 0 done, 1 refused (invalid rows, a failed check, an
HTTP error, a job that ended rejected or failed), 2 usage (a missing credential or file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from cli.client import (
    CREDENTIAL_HINTS,
    DEFAULT_URL,
    FINAL_JOB_STATUSES,
    ClientError,
    Credentials,
    MarketplaceClient,
    MissingCredential,
    RetryPolicy,
    RowsRejected,
    resolve_url,
)
from cli.datafiles import RowFile, RowFileError, batches, file_sha256, read_rows
from pipeline.models.dataspec import RowError, RowValidator

# Each batch is one contribution, checked on its own against spec §8 (at least 100 rows).
MIN_ROWS_PER_CONTRIBUTION = 100
DEFAULT_BATCH_SIZE = 1000


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _note(message: str) -> None:
    _stderr().print(message, markup=False)


def make_client(args: argparse.Namespace) -> MarketplaceClient:
    def on_retry(reason: str, delay: float) -> None:
        _note(f"retrying in {delay:.1f} s: {reason}")

    return MarketplaceClient(
        url=resolve_url(args.url),
        credentials=Credentials.from_env(
            token=args.token, api_key=args.api_key, admin_token=args.admin_token
        ),
        timeout=args.timeout,
        retry=RetryPolicy(attempts=max(1, args.retries + 1)),
        on_retry=on_retry,
    )


def _handles_errors(handler: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """Turn client-side failures into a message on stderr and the documented exit status."""

    def run(args: argparse.Namespace) -> int:
        # `marketplace` logs at INFO; request lines and library chatter are noise here.
        for log_handler in logging.getLogger().handlers:
            log_handler.setLevel(logging.WARNING)
        try:
            return handler(args)
        except MissingCredential as exc:
            _note(f"marketplace: {exc}")
            return 2
        except RowFileError as exc:
            _note(f"marketplace: {exc}")
            return 2 if "no such file" in str(exc) else 1
        except ClientError as exc:
            _note(f"marketplace: {exc}")
            return 1

    return run


# --- validation (pure) ---------------------------------------------------------------------


def file_errors(schema: dict[str, Any], rowfile: RowFile) -> list[RowError]:
    """Every failing row's errors, with the server's paths (`rows[<i>].<field>`), uncapped."""
    found = [RowError(f"rows[{i}]", message, i) for i, message in rowfile.problems]
    broken = {i for i, _ in rowfile.problems}
    found.extend(
        e for e in RowValidator(schema).iter_errors(rowfile.rows) if e.rowIndex not in broken
    )
    return sorted(found, key=lambda e: e.rowIndex)


def quality_report(
    schema: dict[str, Any], rows: list[dict[str, Any]], failing_rows: int, strict: bool
) -> Any:
    """The spec §8 checks of pipeline/checks/quality.py on the rows as the server would store
    them."""
    import pandas as pd

    from pipeline.checks.quality import check_quality
    from pipeline.core.config import load_settings
    from pipeline.intake.parquet_rows import rows_to_table

    settings = load_settings()
    if strict:
        settings = settings.model_copy(update={"data_validation_strict": True})
    frame = None
    if schema.get("properties"):
        try:
            frame = rows_to_table(rows, schema).to_pandas()
        except Exception:  # values that fail the data-spec may not fit its column types
            frame = None
    if frame is None:
        frame = pd.DataFrame.from_records(rows)
    return check_quality(frame, settings, schema_violations=failing_rows)


def _figure(name: str, observed: float, threshold: float) -> str:
    if name in {"completeness", "uniqueness", "column_completeness"}:
        return f"{observed * 100:.1f} % (must be above {threshold * 100:g} %)"
    if name == "row_count":
        return f"{int(observed)} rows (at least {int(threshold)})"
    return f"{int(observed)} failing rows (at most {int(threshold)})"


def print_quality(report: Any) -> None:
    print("quality checks (spec §8):")
    labels = {
        "row_count": "samples",
        "completeness": "completeness",
        "uniqueness": "uniqueness",
        "schema_compliance": "schema compliance",
    }
    for check in report.checks:
        if check.name not in labels:
            continue
        verdict = "ok" if check.passed else "FAIL"
        print(f"  {labels[check.name]:<18} {_figure(check.name, check.observed, check.threshold)}"
              f"  {verdict}")  # fmt: skip
    for check in report.warnings:
        level = "FAIL" if report.strict else "warning"
        print(
            f"  {level}: column {check.column} is "
            f"{_figure(check.name, check.observed, check.threshold)}"
        )
    print("quality: passed" if report.passed else "quality: FAILED")


# --- spec ----------------------------------------------------------------------------------


@_handles_errors
def cmd_spec(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        if args.format == "csv":
            text = client.example(args.model_id, "csv")
        elif args.example:
            text = json.dumps(json.loads(client.example(args.model_id)), indent=2) + "\n"
        else:
            text = json.dumps(client.data_spec(args.model_id), indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        _note(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


# --- validate ------------------------------------------------------------------------------


@_handles_errors
def cmd_validate(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        schema = client.data_spec(args.model_id)
    rowfile = read_rows(Path(args.file), schema)
    errors = file_errors(schema, rowfile)
    for error in errors:
        print(f"{error.path}: {error.message}")
    failing = len({e.rowIndex for e in errors})
    total = len(rowfile.rows)
    if failing:
        print(
            f"{failing} of {total} rows failed validation against model {args.model_id}'s data-spec"
        )
    else:
        print(f"all {total} rows match model {args.model_id}'s data-spec")
    passed = not failing
    if not args.no_quality:
        report = quality_report(schema, rowfile.rows, failing, args.strict)
        print_quality(report)
        passed = passed and report.passed
    return 0 if passed else 1


# --- contribute ----------------------------------------------------------------------------


def batch_idempotency_key(model_id: int, file_digest: str, batch_count: int, index: int) -> str:
    """The same file, model and batching always give batch `index` the same key."""
    material = f"marketplace-contribute\n{model_id}\n{file_digest}\n{batch_count}\n{index}"
    return "mkc-" + hashlib.sha256(material.encode()).hexdigest()[:48]


def load_manifest(path: Path) -> dict[str, Any]:
    """Read and check a spec §2.5 manifest with the server's own check, naming every problem."""
    from pipeline.rewards.manifests import InvalidManifest, load_manifest_file

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


def _progress(console: Console, *columns: Any) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        *columns,
        TimeRemainingColumn(),
        console=console,
    )


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
                _note(f"job {job_id}: {_progress_line(job)}")
            last[job_id] = job
            if job["status"] in FINAL_JOB_STATUSES:
                pending.remove(job_id)
        if pending:
            if time.monotonic() >= deadline:
                break
            time.sleep(poll)
    return last


@_handles_errors
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
            _note(
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
    console = _stderr()
    with _progress(console, MofNCompleteColumn(), TextColumn("rows")) as progress:
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
            _note(f"job {job_id} is still {job['status']} (--wait-timeout reached)")
        elif job["status"] != "rewarded":
            ok = False
    print(f"reward tokens: {total:g}")
    return 0 if ok else 1


# --- upload --------------------------------------------------------------------------------


# The metric a benchmark tracks when none is given, per task type; classification is the
# spec's HTTP default, which a regression model cannot use.
DEFAULT_METRIC = {"classification": "accuracy", "regression": "rmse"}


def model_upload_fields(fields: dict[str, str], model: dict[str, Any] | None) -> dict[str, str]:
    """The upload's form fields with the model's own defaults where the user gave none.

    `target_column` defaults to the model's target column (the spec's HTTP default, `target`,
    rarely is), `metric_name` to the task type's usual metric and `metric_direction` to the
    metric's natural direction. Without the model (unknown id) the fields go as given and the
    server answers.
    """
    from pipeline.evaluation.metrics import METRICS

    chosen = dict(fields)
    if model is not None:
        chosen.setdefault("target_column", str(model["target_column"]))
        metric = DEFAULT_METRIC.get(str(model.get("task_type")))
        if metric is not None:
            chosen.setdefault("metric_name", metric)
    known = METRICS.get(chosen.get("metric_name", ""))
    if known is not None:
        chosen.setdefault("metric_direction", known.direction)
    return chosen


@_handles_errors
def cmd_upload(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise RowFileError(f"{path}: no such file")
    fields = {
        name: value
        for name, value in {
            "eval_split": args.eval_split,
            "metric_name": args.metric_name,
            "metric_direction": args.metric_direction,
            "target_column": args.target_column,
            "input_columns": args.input_columns,
        }.items()
        if value is not None
    }
    if args.allow_pii:
        fields["allow_pii"] = "true"
    size = path.stat().st_size
    with make_client(args) as client:
        if not client.credentials.api_key:
            raise MissingCredential(CREDENTIAL_HINTS["api_key"])
        if not {"target_column", "metric_name", "metric_direction"} <= set(fields):
            model = next((m for m in client.list_models() if m["id"] == args.model_id), None)
            fields = model_upload_fields(fields, model)
            _note(
                f"target column {fields.get('target_column', 'target')}, metric "
                f"{fields.get('metric_name', 'accuracy')} "
                f"({fields.get('metric_direction', 'higher_is_better')})"
            )
        console = _stderr()
        with _progress(console, DownloadColumn(), TransferSpeedColumn()) as progress:
            task = progress.add_task(f"uploading {path.name}", total=size)
            result = client.upload_benchmark(
                args.model_id,
                path,
                fields,
                on_progress=lambda done: progress.update(task, completed=done),
            )
            progress.update(task, completed=size)
    print(json.dumps(result, indent=2))
    if result.get("sha256_hash") and result["sha256_hash"] != file_sha256(path):
        _note("warning: the server's sha256_hash differs from this file's digest")
        return 1
    return 0


# --- keys ----------------------------------------------------------------------------------

KEY_COLUMNS = (
    "key_id",
    "name",
    "key_prefix",
    "service_id",
    "environment",
    "is_active",
    "scopes",
    "created_at",
    "expires_at",
    "last_used_at",
)


def _cell(info: dict[str, Any], name: str) -> str:
    value = info.get(name)
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value is None else str(value)


def _key_line(info: dict[str, Any]) -> str:
    return "\t".join(_cell(info, name) for name in KEY_COLUMNS)


def _print_key_response(answer: dict[str, Any], as_json: bool) -> None:
    """APIKeyResponse: the full key is shown here only, on its own last line."""
    if as_json:
        print(json.dumps(answer, indent=2))
        return
    info = answer["key_info"]
    for name in KEY_COLUMNS:
        print(f"{name}: {_cell(info, name)}")
    _note("The full key is shown only now; store it safely.")
    print(answer["api_key"])


@_handles_errors
def cmd_keys_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "service_id": args.service_id}
    optional = {
        "scopes": args.scope,
        "environment": args.environment,
        "expires_in_days": args.expires_in_days,
        "rate_limit_per_hour": args.rate_limit_per_hour,
        "monthly_prediction_limit": args.monthly_prediction_limit,
        "allowed_ips": args.allowed_ip,
        "billing_plan": args.billing_plan,
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    with make_client(args) as client:
        _print_key_response(client.create_key(body), args.json)
    return 0


@_handles_errors
def cmd_keys_list(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        keys = client.list_keys(args.service_id, args.active_only)
    if args.json:
        print(json.dumps(keys, indent=2))
        return 0
    print("\t".join(KEY_COLUMNS))
    for info in keys:
        print(_key_line(info))
    return 0


@_handles_errors
def cmd_keys_show(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        info = client.get_key(args.key_id)
    print(json.dumps(info, indent=2) if args.json else _key_line(info))
    return 0


@_handles_errors
def cmd_keys_rotate(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        answer = client.rotate_key(args.key_id)
    _note(f"key {args.key_id} is now inactive; its replacement is {answer['key_info']['key_id']}")
    _print_key_response(answer, args.json)
    return 0


@_handles_errors
def cmd_keys_revoke(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        answer = client.revoke_key(args.key_id)
    print(answer.get("message", f"API key {args.key_id} revoked"))
    return 0


# --- registration --------------------------------------------------------------------------


def _connection_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("server")
    group.add_argument(
        "--url", help=f"server base URL (env MARKETPLACE_URL; default {DEFAULT_URL})"
    )
    group.add_argument("--token", help="session token (env MARKETPLACE_TOKEN)")
    group.add_argument("--api-key", help="platform API key (env MARKETPLACE_API_KEY)")
    group.add_argument("--admin-token", help="admin token (env MARKETPLACE_ADMIN_TOKEN)")
    group.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    group.add_argument(
        "--retries", type=int, default=4, help="retries of a transient failure (default 4)"
    )
    return common


def _model_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a model id: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a model id: {text!r}")
    return value


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = _connection_options()

    spec = sub.add_parser(
        "spec", parents=[common], help="fetch a model's data-spec (or its example row)"
    )
    spec.add_argument("model_id", type=_model_id, metavar="MODEL_ID")
    spec.add_argument(
        "--format",
        choices=("json", "csv"),
        default="json",
        help="json: the data-spec (JSON Schema); csv: the example as a CSV template",
    )
    spec.add_argument("--example", action="store_true", help="the example row instead (JSON)")
    spec.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    spec.set_defaults(handler=cmd_spec)

    validate = sub.add_parser(
        "validate",
        parents=[common],
        help="check a CSV/Parquet/JSONL file against a model's data-spec and spec §8",
    )
    validate.add_argument("model_id", type=_model_id, metavar="MODEL_ID")
    validate.add_argument("file", metavar="FILE")
    validate.add_argument(
        "--no-quality", action="store_true", help="skip the spec §8 quality thresholds"
    )
    validate.add_argument(
        "--strict", action="store_true", help="quality warnings fail too (DATA_VALIDATION_STRICT)"
    )
    validate.set_defaults(handler=cmd_validate)

    contribute = sub.add_parser(
        "contribute", parents=[common], help="validate and send a file's rows in batches"
    )
    contribute.add_argument("model_id", type=_model_id, metavar="MODEL_ID")
    contribute.add_argument("file", metavar="FILE")
    contribute.add_argument(
        "--manifest", required=True, metavar="FILE", help="contributor manifest (spec §2.5)"
    )
    contribute.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="most rows per request; batches are made equal (default %(default)s)",
    )
    contribute.add_argument(
        "--wait", action="store_true", help="follow each job to rewarded, rejected or failed"
    )
    contribute.add_argument("--poll-interval", type=float, default=5.0, help="seconds")
    contribute.add_argument("--wait-timeout", type=float, default=3600.0, help="seconds")
    contribute.set_defaults(handler=cmd_contribute)

    upload = sub.add_parser(
        "upload",
        parents=[common],
        help="upload a CSV/Parquet benchmark dataset (platform API key)",
    )
    upload.add_argument("model_id", type=_model_id, metavar="MODEL_ID")
    upload.add_argument("file", metavar="FILE")
    upload.add_argument(
        "--target-column", help="column with ground-truth labels (default: the model's own)"
    )
    upload.add_argument(
        "--metric-name", help="metric tracked (default accuracy; rmse for a regression model)"
    )
    upload.add_argument(
        "--metric-direction",
        choices=("higher_is_better", "lower_is_better"),
        help="default: the metric's natural direction",
    )
    upload.add_argument("--eval-split", help="split used for evaluation (default test)")
    upload.add_argument("--input-columns", help="comma-separated feature columns")
    upload.add_argument(
        "--allow-pii", action="store_true", help="keep the upload even if the PII scan finds some"
    )
    upload.set_defaults(handler=cmd_upload)

    keys = sub.add_parser("keys", help="API keys of the admin token's user (spec §4.6)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser(
        "create", parents=[common], help="create a key; prints the full key once, last"
    )
    create.add_argument("--name", required=True)
    create.add_argument("--service-id", required=True, choices=("prediction", "platform"))
    create.add_argument("--scope", action="append", help="a permission scope (repeatable)")
    create.add_argument("--environment", choices=("production", "test", "development"))
    create.add_argument("--expires-in-days", type=int)
    create.add_argument("--rate-limit-per-hour", type=int)
    create.add_argument("--monthly-prediction-limit", type=int)
    create.add_argument("--allowed-ip", action="append", help="address or CIDR (repeatable)")
    create.add_argument("--billing-plan")
    create.add_argument("--json", action="store_true", help="print the raw APIKeyResponse")
    create.set_defaults(handler=cmd_keys_create)

    listing = keys_sub.add_parser("list", parents=[common], help="list keys (never the value)")
    listing.add_argument("--service-id", choices=("prediction", "platform"))
    listing.add_argument("--active-only", action="store_true")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_keys_list)

    show = keys_sub.add_parser("show", parents=[common], help="one key (never the value)")
    show.add_argument("key_id", metavar="KEY_ID")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_keys_show)

    rotate = keys_sub.add_parser(
        "rotate", parents=[common], help="replace a key; prints the new full key once, last"
    )
    rotate.add_argument("key_id", metavar="KEY_ID")
    rotate.add_argument("--json", action="store_true")
    rotate.set_defaults(handler=cmd_keys_rotate)

    revoke = keys_sub.add_parser("revoke", parents=[common], help="revoke a key (permanent)")
    revoke.add_argument("key_id", metavar="KEY_ID")
    revoke.set_defaults(handler=cmd_keys_revoke)
