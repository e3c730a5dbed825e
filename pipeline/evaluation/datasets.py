"""What a scoring step reads: the model's accepted training versions, its newest benchmark, the
benchmark's evaluation rows and the owner's base training data, each dataset frame read once per
step.

The owner's **base training data** is the rows of the benchmark file whose `split` is not the
benchmark's `eval_split` (conventionally `train`): the model the owner already has is trained on
them, so every evaluation trains on base + accepted rows ("without") and base + accepted + the
batch ("with"). A file without a `split` column has no base data. The base data belongs to the
benchmark version: a new benchmark version replaces it with its own.

Accepted training rows are the rows of contributions accepted by a valuation: status
`rewarded`, or `evaluating` with a positive share (valued, rewards pending). Rows rejected are
never training data, so a contribution that makes the model worse cannot lower the baseline
the next one is measured against. `accepted_items` lists them;
`pipeline.rewards.ledger.accepted_data` is the audit view (which versions, who).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import pandas as pd
from sqlalchemy import select

from pipeline.core.db import Database
from pipeline.core.errors import DomainError, InvalidInput
from pipeline.core.tables import BenchmarkSpec, Contribution, DatasetVersion, Model
from pipeline.evaluation.batches import VersionItem, load_frame, version_item
from pipeline.evaluation.jobs import accepted_contribution
from pipeline.evaluation.trainers import StepTrainers
from pipeline.models.definitions import model_recipe
from pipeline.models.estimators import Recipe

if TYPE_CHECKING:
    from pipeline.sandbox.runner import TrainerRunner
    from pipeline.services import Services


@dataclass(frozen=True)
class BenchmarkData:
    """A benchmark's metric settings and the rows it is scored on."""

    spec_id: str
    metric_name: str
    metric_direction: str
    target_column: str
    input_columns: list[str]
    frame: pd.DataFrame  # rows of the evaluation split
    base: pd.DataFrame  # the owner's base training data: the other splits' rows

    @property
    def base_rows(self) -> int:
        return len(self.base)

    def training_frame(self, accepted: Sequence[pd.DataFrame]) -> pd.DataFrame | None:
        """The base data followed by the accepted rows; None when both are empty."""
        return concat_frames([self.base, *accepted])


class DatasetFrames:
    """Dataset frames read once per step; accepted training versions are read in parallel.

    Also the step's owner trainers (`trainers`: each model's folder fetched once); `close()`
    removes their unpacked folders.
    """

    def __init__(self, svc: Services, runner: TrainerRunner | None = None) -> None:
        self.svc = svc
        self._frames: dict[int, pd.DataFrame] = {}
        self._benchmarks: dict[str, BenchmarkData] = {}
        self.trainers = StepTrainers(svc, runner)

    def close(self) -> None:
        self.trainers.close()

    def version(self, item: VersionItem) -> pd.DataFrame:
        if item.dataset_version_id not in self._frames:
            self._frames[item.dataset_version_id] = load_frame(self.svc.store, item)
        return self._frames[item.dataset_version_id]

    def many(self, items: Sequence[VersionItem]) -> list[pd.DataFrame]:
        missing = [i for i in items if i.dataset_version_id not in self._frames]
        if missing:
            workers = max(1, min(self.svc.settings.parallel_workers, len(missing)))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for item, frame in zip(
                    missing, pool.map(lambda i: load_frame(self.svc.store, i), missing), strict=True
                ):
                    self._frames[item.dataset_version_id] = frame
        return [self._frames[i.dataset_version_id] for i in items]

    def benchmark(self, spec: BenchmarkSpec) -> BenchmarkData:
        if spec.id not in self._benchmarks:
            with self.svc.db.session() as session:
                dv = session.get(DatasetVersion, spec.dataset_version_id)
            if dv is None:
                raise DomainError(f"benchmark {spec.id} has no dataset version")
            whole = load_frame(self.svc.store, version_item(dv))
            self._benchmarks[spec.id] = BenchmarkData(
                spec.id,
                spec.metric_name,
                spec.metric_direction,
                spec.target_column,
                list(spec.input_columns or []),
                benchmark_eval_rows(whole, spec.eval_split),
                benchmark_base_rows(whole, spec.eval_split),
            )
        return self._benchmarks[spec.id]


SPLIT_COLUMN = "split"


def benchmark_eval_rows(frame: pd.DataFrame, eval_split: str) -> pd.DataFrame:
    """The rows a benchmark is scored on.

    With a `split` column, the rows whose split equals `eval_split` (none is an error);
    without one, every row. The split column itself is dropped.
    """
    if SPLIT_COLUMN not in frame.columns:
        return frame
    rows = frame[frame[SPLIT_COLUMN].astype(str) == eval_split]
    if rows.empty:
        raise DomainError(f"the benchmark has no rows with split {eval_split!r}")
    return rows.drop(columns=[SPLIT_COLUMN]).reset_index(drop=True)


def benchmark_base_rows(frame: pd.DataFrame, eval_split: str) -> pd.DataFrame:
    """The owner's base training data: the rows of every other split (module docstring).

    Without a `split` column, none. The split column itself is dropped.
    """
    if SPLIT_COLUMN not in frame.columns:
        return frame.iloc[0:0]
    rows = frame[frame[SPLIT_COLUMN].astype(str) != eval_split]
    return rows.drop(columns=[SPLIT_COLUMN]).reset_index(drop=True)


def latest_benchmark(db: Database, model_id: int) -> BenchmarkSpec | None:
    """The model's newest BenchmarkSpec: the one on the highest dataset version."""
    with db.session() as session:
        return session.scalar(
            select(BenchmarkSpec)
            .join(DatasetVersion, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(BenchmarkSpec.model_id == model_id)
            .order_by(DatasetVersion.version_number.desc(), BenchmarkSpec.created_at.desc())
            .limit(1)
        )


def accepted_items(
    db: Database, model_id: int, exclude: Collection[str | None] = ()
) -> list[VersionItem]:
    """Versions whose rows train the model (see the module docstring)."""
    with db.session() as session:
        rows = session.execute(
            select(Contribution.id, DatasetVersion)
            .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
            .where(Contribution.model_id == model_id, accepted_contribution())
            .order_by(DatasetVersion.version_number)
        ).all()
    return [version_item(dv, contribution_id=job) for job, dv in rows if job not in exclude]


class ModelSettings(NamedTuple):
    """How a model is trained: its task type, its recipe (None for a model with the owner's
    trainer) and its paired fits K (`pipeline.models.paired_fits`)."""

    task_type: str
    recipe: Recipe | None
    paired_fits: int


def model_settings(db: Database, model_id: int) -> ModelSettings:
    """The model's `ModelSettings`, read in one session."""
    with db.session() as session:
        model = session.get(Model, model_id)
        if model is None:
            raise InvalidInput(f"model {model_id} not found")
        return ModelSettings(model.task_type, model_recipe(model), model.paired_fits)


def concat_frames(frames: Sequence[pd.DataFrame]) -> pd.DataFrame | None:
    """The non-empty frames one after the other; None when there is none."""
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None
