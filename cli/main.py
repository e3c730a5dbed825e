"""Entry point of the `marketplace` command; subcommands are registered by small modules."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from cli import contributor, demo, operate, orgs, partitions, payouts, settle
from cli.devmode import quiet_library_loggers
from pipeline.core.config import ConfigError
from pipeline.core.errors import DomainError

Register = Callable[[argparse._SubParsersAction], None]  # type: ignore[type-arg]

REGISTRARS: list[Register] = [
    operate.register,
    orgs.register,
    contributor.register,
    demo.register,
    partitions.register,
    payouts.register,
    settle.register,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="marketplace", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for register in REGISTRARS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    quiet_library_loggers()
    args = build_parser().parse_args(argv)
    try:
        result = args.handler(args)
    except ConfigError as exc:
        print(f"marketplace: {exc}", file=sys.stderr)
        return 2
    except DomainError as exc:
        print(f"marketplace: {exc.detail}", file=sys.stderr)
        return 1
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
