"""The instance's run coordinator: every evaluation run carries its model's run-queue tag.

dagster.yaml limits runs per value of `marketplace/model_id` to one (`tag_concurrency_limits`),
but a tag limits only the runs that carry it. The arrival and schedule sensors set it; the UI's
"Materialize" (the implicit asset job), "Materialize all" (an asset backfill), the Launchpad and
re-executions do not, and in dagster 1.13 neither a job's tags nor a partitioned config's tag
function reach the runs of the implicit asset job or of an asset backfill. Every run, whatever
launched it, is submitted through the instance's run coordinator before it is queued: this one
adds the tags there, from the run's partition, then queues it as Dagster's own does.

It also says who launched a run: `marketplace/trigger=manual` on a run without the sensors' tags
and on a re-execution (which copies its parent's tags, `dagster/sensor_name` included).
"""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg
from dagster._core.run_coordinator import QueuedRunCoordinator, SubmitRunContext

from assets.partitions import TAG_CONCURRENCY, TAG_MODEL, TAG_TRIGGER, parse_partition_key

PARTITION_TAG = "dagster/partition"
PARENT_RUN_TAG = "dagster/parent_run_id"
# Set by Dagster's automatic run retries: a retry keeps its parent's trigger.
AUTO_RETRY_TAG = "dagster/retry_number"


def queue_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The tags to add to a run with `tags`: its model's queue tag and its trigger."""
    added: dict[str, str] = {}
    try:
        model_id, _ = parse_partition_key(tags.get(PARTITION_TAG, ""))
    except ValueError:
        return added  # not a dataset-version run: nothing to serialize
    if tags.get(TAG_MODEL) != str(model_id):
        added[TAG_MODEL] = str(model_id)
    if TAG_CONCURRENCY not in tags:
        added[TAG_CONCURRENCY] = "true"
    reexecution = PARENT_RUN_TAG in tags and AUTO_RETRY_TAG not in tags
    if TAG_TRIGGER not in tags or (reexecution and tags[TAG_TRIGGER] != "manual"):
        added[TAG_TRIGGER] = "manual"
    return added


class MarketplaceRunCoordinator(QueuedRunCoordinator):  # type: ignore[type-arg]
    """Dagster's queued run coordinator, adding `queue_tags` before a run is queued."""

    def submit_run(self, context: SubmitRunContext) -> dg.DagsterRun:
        run = context.dagster_run
        added = queue_tags(run.tags)
        if added:
            self._instance.add_run_tags(run.run_id, added)
            updated = self._instance.get_run_by_id(run.run_id)
            if updated is not None:
                context = context._replace(dagster_run=updated)
        return super().submit_run(context)
