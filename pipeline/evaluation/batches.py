"""Batches of dataset versions: what one run processes, item by item.

A run for a model's dataset version claims a `Batch` of pending dataset versions
(`pipeline.evaluation.claims`), moves their jobs through the statuses of
`pipeline.evaluation.jobs` under leases (`pipeline.evaluation.leases`), checks them
(`pipeline.checks.batch`) and scores them (`pipeline.rewards.batch_scoring`).

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeline.core.tables import DatasetVersion
from pipeline.store.objectstore import ObjectStore
from pipeline.store.reading import read_dataset

# --- batches -------------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionItem:
    """One dataset version in a batch."""

    dataset_version_id: int
    model_id: int
    version: str
    version_number: int
    kind: str  # contribution | benchmark | external
    object_key: str
    file_format: str
    contribution_id: str | None = None
    benchmark_spec_id: str | None = None

    @property
    def is_contribution(self) -> bool:
        return self.contribution_id is not None


@dataclass(frozen=True)
class Batch:
    """What one run processes: pending versions in version order, and whether to re-score."""

    model_id: int
    version: str
    trigger: str
    items: tuple[VersionItem, ...] = ()
    rescore: bool = False
    run_id: str | None = None
    claim: str | None = None  # `claimed_by` of the jobs this batch holds
    # Claimed under the model's claim (`claim_run_batch`): valuation and payment then require
    # that the claim is still held (`pipeline.evaluation.model_claims.hold_model`).
    model_held: bool = False

    @property
    def versions(self) -> list[str]:
        return [item.version for item in self.items]

    def contributions(self) -> list[VersionItem]:
        return [item for item in self.items if item.is_contribution]


@dataclass(frozen=True)
class StepResult:
    """What a step hands to the next: the batch and this step's per-version outcomes."""

    batch: Batch
    outcomes: tuple[Any, ...] = ()


def version_item(dv: DatasetVersion, **ids: Any) -> VersionItem:
    """A dataset version row as a batch item (`ids`: its contribution or benchmark id)."""
    return VersionItem(
        dataset_version_id=dv.id,
        model_id=dv.model_id,
        version=dv.version,
        version_number=dv.version_number,
        kind=dv.kind,
        object_key=dv.object_key,
        file_format=dv.file_format,
        **ids,
    )


# --- reading dataset versions --------------------------------------------------------------


def load_frame(store: ObjectStore, item: VersionItem) -> pd.DataFrame:
    """A version's file as a DataFrame, read with pyarrow (UnreadableDataset when invalid)."""

    with store.local_path(item.object_key) as path:
        return read_dataset(path, item.file_format)
