"""What every subcommand that talks to a server shares: its options, its client, its exit status.

`--url`, else MARKETPLACE_URL, else http://127.0.0.1:8000; credentials from the options, else
the environment. A client-side failure becomes a message on stderr and the documented exit
status: 1 refused (an HTTP error, invalid rows), 2 usage (a missing credential or file).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from cli.client import (
    DEFAULT_URL,
    ClientError,
    Credentials,
    MarketplaceClient,
    MissingCredential,
    RetryPolicy,
    resolve_url,
)
from cli.datafiles import RowFileError
from cli.terminal import note


def connection_options() -> argparse.ArgumentParser:
    """The server options, as a parent parser of each subcommand that talks to a server."""
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


def parse_model_id(text: str) -> int:
    """A MODEL_ID argument: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a model id: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a model id: {text!r}")
    return value


def make_client(args: argparse.Namespace) -> MarketplaceClient:
    def on_retry(reason: str, delay: float) -> None:
        note(f"retrying in {delay:.1f} s: {reason}")

    return MarketplaceClient(
        url=resolve_url(args.url),
        credentials=Credentials.from_env(
            token=args.token, api_key=args.api_key, admin_token=args.admin_token
        ),
        timeout=args.timeout,
        retry=RetryPolicy(attempts=max(1, args.retries + 1)),
        on_retry=on_retry,
    )


def handles_errors(handler: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """Turn client-side failures into a message on stderr and the documented exit status."""

    def run(args: argparse.Namespace) -> int:
        # `marketplace` logs at INFO; request lines and library chatter are noise here.
        for log_handler in logging.getLogger().handlers:
            log_handler.setLevel(logging.WARNING)
        try:
            return handler(args)
        except MissingCredential as exc:
            note(f"marketplace: {exc}")
            return 2
        except RowFileError as exc:
            note(f"marketplace: {exc}")
            return 2 if "no such file" in str(exc) else 1
        except ClientError as exc:
            note(f"marketplace: {exc}")
            return 1

    return run
