"""Contributor subcommands over HTTP: spec, validate, contribute, upload and keys (registration).

They talk to a running server (`--url`, else MARKETPLACE_URL, else http://127.0.0.1:8000) and
fetch the model's data-spec at run time, so a file is checked against the same JSON Schema,
with the same `rows[<i>].<field>` paths, as the server would use. Results go to stdout,
progress and notes to stderr. Exit status: 0 done, 1 refused (invalid rows, a failed check, an
HTTP error, a job that ended rejected or failed), 2 usage (a missing credential or file).

Each command's body is in a module of its own: cli/spec.py, cli/validate.py, cli/contribute.py,
cli/upload.py and cli/keys.py; what they share is in cli/connection.py and cli/terminal.py.
"""

from __future__ import annotations

import argparse

from cli import keys
from cli.connection import connection_options, parse_model_id
from cli.contribute import DEFAULT_BATCH_SIZE, cmd_contribute
from cli.spec import cmd_spec
from cli.upload import cmd_upload
from cli.validate import cmd_validate

Subparsers = argparse._SubParsersAction  # type: ignore[type-arg]


def register(sub: Subparsers) -> None:
    common = connection_options()
    _add_spec(sub, common)
    _add_validate(sub, common)
    _add_contribute(sub, common)
    _add_upload(sub, common)
    _add_keys(sub, common)


def _add_spec(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    spec = sub.add_parser(
        "spec", parents=[common], help="fetch a model's data-spec (or its example row)"
    )
    spec.add_argument("model_id", type=parse_model_id, metavar="MODEL_ID")
    spec.add_argument(
        "--format",
        choices=("json", "csv"),
        default="json",
        help="json: the data-spec (JSON Schema); csv: the example as a CSV template",
    )
    spec.add_argument("--example", action="store_true", help="the example row instead (JSON)")
    spec.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    spec.set_defaults(handler=cmd_spec)


def _add_validate(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    validate = sub.add_parser(
        "validate",
        parents=[common],
        help="check a CSV/Parquet/JSONL file against a model's data-spec and spec §8",
    )
    validate.add_argument("model_id", type=parse_model_id, metavar="MODEL_ID")
    validate.add_argument("file", metavar="FILE")
    validate.add_argument(
        "--no-quality", action="store_true", help="skip the spec §8 quality thresholds"
    )
    validate.add_argument(
        "--strict", action="store_true", help="quality warnings fail too (DATA_VALIDATION_STRICT)"
    )
    validate.set_defaults(handler=cmd_validate)


def _add_contribute(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    contribute = sub.add_parser(
        "contribute", parents=[common], help="validate and send a file's rows in batches"
    )
    contribute.add_argument("model_id", type=parse_model_id, metavar="MODEL_ID")
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


def _add_upload(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    upload = sub.add_parser(
        "upload",
        parents=[common],
        help="upload a CSV/Parquet benchmark dataset (platform API key)",
    )
    upload.add_argument("model_id", type=parse_model_id, metavar="MODEL_ID")
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


def _add_keys(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("keys", help="API keys of the admin token's user (spec §4.6)")
    keys_sub = parser.add_subparsers(dest="keys_command", required=True)
    _add_keys_create(keys_sub, common)

    listing = keys_sub.add_parser("list", parents=[common], help="list keys (never the value)")
    listing.add_argument("--service-id", choices=("prediction", "platform"))
    listing.add_argument("--active-only", action="store_true")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=keys.cmd_keys_list)

    show = keys_sub.add_parser("show", parents=[common], help="one key (never the value)")
    show.add_argument("key_id", metavar="KEY_ID")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=keys.cmd_keys_show)

    rotate = keys_sub.add_parser(
        "rotate", parents=[common], help="replace a key; prints the new full key once, last"
    )
    rotate.add_argument("key_id", metavar="KEY_ID")
    rotate.add_argument("--json", action="store_true")
    rotate.set_defaults(handler=keys.cmd_keys_rotate)

    revoke = keys_sub.add_parser("revoke", parents=[common], help="revoke a key (permanent)")
    revoke.add_argument("key_id", metavar="KEY_ID")
    revoke.set_defaults(handler=keys.cmd_keys_revoke)


def _add_keys_create(keys_sub: Subparsers, common: argparse.ArgumentParser) -> None:
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
    create.set_defaults(handler=keys.cmd_keys_create)
