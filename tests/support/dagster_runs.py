"""Running the code location's assets in process, as a run of Dagster's would."""

from __future__ import annotations

import dagster as dg

from assets import ASSET_CHECKS, ASSETS
from assets.partitions import PARTITIONS_DEF_NAME, TAG_TRIGGER, TAG_VERSIONS, partition_key
from assets.resources import resource_defs
from pipeline.core.config import Settings


def materialize(
    settings: Settings,
    instance: dg.DagsterInstance,
    model_id: int,
    versions: list[str],
    *,
    trigger: str = "arrival",
    selection: list[str] | None = None,
) -> dg.ExecuteInProcessResult:
    """Materialize every asset (and check) for the partition of the newest of `versions`."""
    keys = [partition_key(model_id, v) for v in versions]
    instance.add_dynamic_partitions(PARTITIONS_DEF_NAME, keys)
    return dg.materialize(
        [*ASSETS, *ASSET_CHECKS],
        partition_key=keys[-1],
        instance=instance,
        resources=resource_defs(settings),
        tags={TAG_TRIGGER: trigger, TAG_VERSIONS: ",".join(versions)},
        raise_on_error=False,
        selection=selection,
    )
