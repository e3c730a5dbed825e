"""`marketplace keys create/list/show/rotate/revoke`: the admin token's user's API keys (spec §4.6).

A full key is printed only by create and rotate, on its own last line, so `| tail -1` takes it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from cli.connection import handles_errors, make_client
from cli.terminal import note

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
    note("The full key is shown only now; store it safely.")
    print(answer["api_key"])


@handles_errors
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


@handles_errors
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


@handles_errors
def cmd_keys_show(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        info = client.get_key(args.key_id)
    print(json.dumps(info, indent=2) if args.json else _key_line(info))
    return 0


@handles_errors
def cmd_keys_rotate(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        answer = client.rotate_key(args.key_id)
    note(f"key {args.key_id} is now inactive; its replacement is {answer['key_info']['key_id']}")
    _print_key_response(answer, args.json)
    return 0


@handles_errors
def cmd_keys_revoke(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        answer = client.revoke_key(args.key_id)
    print(answer.get("message", f"API key {args.key_id} revoked"))
    return 0
