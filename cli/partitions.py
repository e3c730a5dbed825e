"""Partition subcommands: partitions retire (docs/scale.md)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from cli.dagster_instance import dagster_home, dagster_storage_url
from pipeline.core.config import ConfigError, Settings, get_settings
from pipeline.core.tables import isoformat_utc, utcnow
from pipeline.triggers.retirement import settled_cutoff

if TYPE_CHECKING:
    import dagster as dg


def dagster_instance(settings: Settings) -> dg.DagsterInstance:
    """The instance `marketplace dev` runs on: DAGSTER_HOME, else the one in the data dir.

    Unlike `dev`, this never writes the instance config: a maintenance command must not
    replace an operator's dagster.yaml.
    """
    import dagster as dg  # ~0.3 s: not at every `marketplace` start

    home = dagster_home(settings)
    if not (home / "dagster.yaml").is_file():
        raise ConfigError(
            f"no Dagster instance at {home} (no dagster.yaml): set DAGSTER_HOME or run "
            "`marketplace dev` once"
        )
    os.environ["DAGSTER_HOME"] = str(home)
    if settings.dagster_pg_url:
        os.environ["DAGSTER_PG_URL"] = dagster_storage_url(settings.dagster_pg_url)
    return dg.DagsterInstance.get()


def cmd_retire(args: argparse.Namespace) -> int:
    from assets.partitions import plan_retirement, retire_settled  # Dagster: ~0.7 s
    from pipeline.services import Services  # alembic, pyarrow and numpy: ~0.2 s

    settings = get_settings()
    keep_hours = settings.partition_keep_hours if args.keep_hours is None else args.keep_hours
    cutoff = settled_cutoff(utcnow(), keep_hours)
    limit = args.limit if args.limit is not None else sys.maxsize
    instance = dagster_instance(settings)
    services = Services(settings)
    try:
        if args.dry_run:
            plan = plan_retirement(instance, services.db, settled_before=cutoff, limit=limit)
            retired, scanned = len(plan.keys), plan.scanned
        else:
            retired, scanned = retire_settled(
                instance, services.db, settled_before=cutoff, limit=limit, threads=args.threads
            )
    finally:
        instance.dispose()
        services.close()
    verb = "would retire" if args.dry_run else "retired"
    print(
        f"{verb} {retired} partition(s) of dataset versions settled before "
        f"{isoformat_utc(cutoff)} ({scanned} looked at)"
    )
    return 0


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return number


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    partitions = sub.add_parser("partitions", help="Dagster partitions of dataset versions")
    partitions_sub = partitions.add_subparsers(dest="partitions_command", required=True)
    retire = partitions_sub.add_parser(
        "retire", help="delete the partitions of settled dataset versions (docs/scale.md)"
    )
    retire.add_argument(
        "--keep-hours", type=_non_negative, default=None,
        help="keep window in hours (default: PARTITION_KEEP_HOURS)",
    )  # fmt: skip
    retire.add_argument("--limit", type=_non_negative, default=None, help="retire at most N")
    retire.add_argument("--threads", type=int, default=4, help="parallel deletes (default 4)")
    retire.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    retire.set_defaults(handler=cmd_retire)
