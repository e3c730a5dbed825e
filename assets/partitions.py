"""Names shared by assets and sensors: the dataset-version partitions, the job and run tags;
and retiring the partitions of settled versions (docs/scale.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import dagster as dg

from pipeline.core.db import Database
from pipeline.triggers.retirement import settled_versions

# One partition per stored dataset version; a MultiPartitionsDefinition would cross every model
# with every version, most of which do not exist.
PARTITIONS_DEF_NAME = "dataset_versions"
dataset_versions = dg.DynamicPartitionsDefinition(name=PARTITIONS_DEF_NAME)

EVALUATION_JOB = "evaluation_job"

# Run tags. The concurrency key is what dagster.yaml limits to SCHEDULER_MAX_CONCURRENT.
TAG_CONCURRENCY = "marketplace/evaluation"
TAG_MODEL = "marketplace/model_id"
TAG_TRIGGER = "marketplace/trigger"  # arrival | schedule | manual
TAG_VERSIONS = "marketplace/versions"  # comma-separated versions a debounced run covers

RETIRE_PAGE_SIZE = 1000
# Keys planned and then deleted per round of `retire_settled`: bounds memory on a backlog.
RETIRE_ROUND = 5000


def partition_key(model_id: int, version: str) -> str:
    """A dataset version's partition, `{model_id}__{version}`: the one place this form is
    written (the core knows versions, not partitions)."""
    return f"{model_id}__{version}"


def parse_partition_key(key: str) -> tuple[int, str]:
    """(model id, version) of a key `partition_key` made; ValueError for any other key."""
    model, sep, version = key.partition("__")
    if not sep or not model.isdigit() or not version:
        raise ValueError(f"not a dataset-version partition key: {key!r}")
    return int(model), version


@dataclass(frozen=True)
class RetirementPlan:
    """Settled partitions found by one pass, oldest first, and where the next pass goes on."""

    keys: list[str]
    scanned: int
    cursor: str | None  # where the next pass starts; None: from the oldest partition
    finished: bool  # this pass reached the newest partition


def plan_retirement(
    instance: dg.DagsterInstance,
    db: Database,
    *,
    settled_before: datetime,
    limit: int,
    cursor: str | None = None,
    page_size: int = RETIRE_PAGE_SIZE,
    time_budget_seconds: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> RetirementPlan:
    """Walk the partitions oldest first from `cursor`, a page at a time, collecting settled ones.

    Reads only the pages it walks (the instance pages by storage id), never the whole list. Stops
    at the end, at `limit` keys or when the time budget is spent. A page that holds more settled
    keys than the limit leaves room for is walked again by the next pass (the cursor stays
    before it), so no settled partition is skipped.
    """
    deadline = None if time_budget_seconds is None else monotonic() + time_budget_seconds
    keys: list[str] = []
    scanned = 0
    cursor = cursor or None
    finished = False
    while len(keys) < limit:
        page = instance.get_paginated_dynamic_partitions(
            PARTITIONS_DEF_NAME, limit=page_size, ascending=True, cursor=cursor
        )
        scanned += len(page.results)
        parsed: dict[tuple[int, str], str] = {}
        for key in page.results:
            try:
                parsed[parse_partition_key(key)] = key
            except ValueError:
                continue  # not one of ours: left alone
        with db.session() as session:
            settled = settled_versions(session, parsed, settled_before)
        found = [key for pair, key in parsed.items() if pair in settled]
        room = limit - len(keys)
        if len(found) > room:
            keys.extend(found[:room])
            break
        keys.extend(found)
        if not page.has_more:
            cursor, finished = None, True
            break
        cursor = page.cursor
        if deadline is not None and monotonic() >= deadline:
            break
    return RetirementPlan(keys, scanned, cursor, finished)


def delete_partitions(instance: dg.DagsterInstance, keys: Sequence[str], threads: int = 4) -> int:
    """Delete dataset-version partitions; returns how many were asked for.

    Dagster deletes one key per call, each on a connection of its own (dagster-postgres does not
    pool), so a backlog goes through a few threads; materialization events stay in the event log.
    """

    def delete(key: str) -> None:
        instance.delete_dynamic_partition(PARTITIONS_DEF_NAME, key)

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        list(pool.map(delete, keys))
    return len(keys)


def retire_settled(
    instance: dg.DagsterInstance,
    db: Database,
    *,
    settled_before: datetime,
    limit: int,
    threads: int = 4,
) -> tuple[int, int]:
    """Delete up to `limit` settled partitions in one walk, round by round; (retired, looked at)."""
    retired = scanned = 0
    cursor: str | None = None
    while retired < limit:
        plan = plan_retirement(
            instance,
            db,
            settled_before=settled_before,
            limit=min(RETIRE_ROUND, limit - retired),
            cursor=cursor,
        )
        retired += delete_partitions(instance, plan.keys, threads=threads)
        scanned += plan.scanned
        if plan.finished:
            break
        cursor = plan.cursor
    return retired, scanned
