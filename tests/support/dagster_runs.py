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
    """Materialize every dataset-version asset (and check) for the partition of the newest of
    `versions`; the settlement asset, partitioned by epoch, is not in that run."""
    keys = [partition_key(model_id, v) for v in versions]
    if selection is None:
        selection = [
            key for asset in ASSETS if _by_version(asset.partitions_def) for key in asset.keys
        ]
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


def _by_version(partitions: dg.PartitionsDefinition | None) -> bool:
    return (
        isinstance(partitions, dg.DynamicPartitionsDefinition)
        and partitions.name == PARTITIONS_DEF_NAME
    )
