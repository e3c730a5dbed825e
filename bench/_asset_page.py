"""The asset page's side of bench/partitions.py: its partition query over HTTP, and the rows of
Dagster's `dynamic_partitions` table the server reads meanwhile."""

from __future__ import annotations

import time
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from bench._dagster_processes import Process
from bench._partition_registry import ASSET

# The asset page's partition query, as dagster-webserver 1.13's UI bundle sends it.
PARTITION_HEALTH_QUERY = """
query PartitionHealthQuery($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      id
      partitionKeysByDimension { name type partitionKeys }
      assetPartitionStatuses {
        ... on TimePartitionStatuses {
          ranges { status startTime endTime startKey endKey }
        }
        ... on DefaultPartitionStatuses {
          materializedPartitions
          materializingPartitions
          failedPartitions
        }
        ... on MultiPartitionStatuses {
          primaryDimensionName
          ranges {
            primaryDimStartKey primaryDimEndKey primaryDimStartTime primaryDimEndTime
            secondaryDim {
              ... on TimePartitionStatuses {
                ranges { status startTime endTime startKey endKey }
              }
              ... on DefaultPartitionStatuses {
                materializedPartitions materializingPartitions failedPartitions
              }
            }
          }
        }
      }
    }
  }
}
"""


class PartitionReads:
    """Rows of Dagster's `dynamic_partitions` table the server has read so far (sequential scans
    plus index entries read, index-only scans included): loading every partition key reads
    the whole table once.

    A backend that stays connected (the webserver keeps one) reports its statistics only after
    10 s idle (PostgreSQL's PGSTAT_IDLE_INTERVAL), so a reading waits that long and then takes a
    fresh snapshot.
    """

    def __init__(self, dagster_url: str) -> None:
        self.engine = create_engine(dagster_url, poolclass=NullPool)

    def __call__(self) -> int:
        time.sleep(11)
        with self.engine.connect() as conn:
            conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            value = conn.execute(
                text(
                    "SELECT coalesce(t.seq_tup_read, 0) + ("
                    " SELECT coalesce(sum(i.idx_tup_read), 0) FROM pg_stat_user_indexes i"
                    " WHERE i.relid = t.relid) "
                    "FROM pg_stat_user_tables t WHERE t.relname = 'dynamic_partitions'"
                )
            ).scalar_one()
        return int(value)


def graphql_once(url: str) -> tuple[float, int, dict[str, Any]]:
    start = time.perf_counter()
    response = httpx.post(
        f"{url}/graphql",
        json={"query": PARTITION_HEALTH_QUERY, "variables": {"assetKey": {"path": [ASSET]}}},
        timeout=600,
    )
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(f"GraphQL errors: {body['errors']}")
    return elapsed, len(response.content), body["data"]["assetNodeOrError"]


def wait_for_webserver(url: str, webserver: Process, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, _, node = graphql_once(url)
            if "partitionKeysByDimension" in node:
                return
        except (httpx.HTTPError, RuntimeError, KeyError, TypeError):
            pass
        if webserver.proc.poll() is not None:
            break
        time.sleep(1)
    raise RuntimeError(f"dagster-webserver did not serve the asset:\n{webserver.tail()}")


def counted(reads: PartitionReads, action: Any) -> tuple[Any, int]:
    """`action()` and the `dynamic_partitions` rows the server read meanwhile."""
    before = reads()
    value = action()
    return value, reads() - before
