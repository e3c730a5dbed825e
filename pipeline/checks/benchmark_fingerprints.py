"""Benchmark fingerprints of a model: where they are stored, building them when missing, and
reading a benchmark's rows for the checks.

Every benchmark version of the model is fingerprinted at upload (`fingerprint_benchmark_file`,
called by `pipeline.intake.uploads`), or by the pipeline when its fingerprints are missing
(`ensure_benchmark_fingerprints`), and stored at `integrity/{model_id}/{version}/` in the object
store (outside `datasets/`, so no arrival is triggered).

Only the rows of the evaluation split are the benchmark here: the file's other rows are the
owner's base training data (`pipeline.evaluation.datasets`), which a contribution may repeat
without leaking anything; `pipeline.checks.known_rows` treats such rows as known rows instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import select

from pipeline.checks.fingerprint_files import (
    Fingerprints,
    FingerprintSummary,
    build_fingerprints,
    open_fingerprints,
    read_footer,
)
from pipeline.checks.fingerprints import fingerprint_columns
from pipeline.core.tables import BenchmarkSpec, DatasetVersion, Model
from pipeline.evaluation.batches import VersionItem, version_item
from pipeline.evaluation.datasets import SPLIT_COLUMN
from pipeline.models.definitions import model_recipe
from pipeline.models.estimators import Recipe, check_estimator
from pipeline.store.dataset_batches import RetypeColumns, file_batches
from pipeline.store.reading import read_dataset

if TYPE_CHECKING:
    from pipeline.services import Services

log = logging.getLogger(__name__)

PREFIX = "integrity"

BatchSource = Callable[[], Iterator[pa.RecordBatch]]


def benchmark_fingerprint_key(model_id: int, version: str) -> str:
    return f"{PREFIX}/{model_id}/{version}/benchmark.fingerprints"


def fingerprint_benchmark_file(
    path: Path,
    file_format: str,
    *,
    columns: Sequence[str],
    target_column: str,
    input_columns: Sequence[str],
    task_type: str,
    eval_split: str,
    out: Path,
    tmp_root: Path,
) -> FingerprintSummary:
    """Fingerprint a benchmark file's evaluation rows (input columns and target) into `out`.

    With a `split` column, only the rows whose split is `eval_split` (module docstring).
    """
    return fingerprint_benchmark_batches(
        lambda wanted: file_batches(path, file_format, wanted),
        columns=columns,
        target_column=target_column,
        input_columns=input_columns,
        task_type=task_type,
        eval_split=eval_split,
        out=out,
        tmp_root=tmp_root,
    )


def fingerprint_benchmark_batches(
    source: Callable[[Sequence[str]], BatchSource],
    *,
    columns: Sequence[str],
    target_column: str,
    input_columns: Sequence[str],
    task_type: str,
    eval_split: str,
    out: Path,
    tmp_root: Path,
) -> FingerprintSummary:
    """`fingerprint_benchmark_file` for any source: `source(wanted)` is a restartable stream of
    the `wanted` columns of the benchmark's rows (`columns`: all its columns), in file order."""
    fingerprinted = fingerprint_columns(columns, target_column, input_columns)
    if SPLIT_COLUMN in columns:
        batches = _evaluation_rows(source([*fingerprinted, SPLIT_COLUMN]), eval_split)
    else:
        batches = source(fingerprinted)
    return build_fingerprints(
        batches,
        columns=fingerprinted,
        target=target_column,
        classification=task_type == "classification",
        out=out,
        tmp_root=tmp_root,
    )


def _evaluation_rows(source: BatchSource, eval_split: str) -> BatchSource:
    def batches() -> Iterator[pa.RecordBatch]:
        for batch in source():
            split = pc.cast(batch.column(SPLIT_COLUMN), pa.string())
            kept = batch.filter(pc.equal(split, eval_split))
            yield kept.select([c for c in kept.schema.names if c != SPLIT_COLUMN])

    return batches


@dataclass(frozen=True)
class BenchmarkRef:
    """One benchmark version of a model: where its file and fingerprints are."""

    spec_id: str
    model_id: int
    version: str
    version_number: int
    item: VersionItem
    target_column: str
    input_columns: tuple[str, ...]
    columns: tuple[str, ...]
    eval_split: str = "test"

    @property
    def fingerprint_key(self) -> str:
        return benchmark_fingerprint_key(self.model_id, self.version)


def model_benchmarks(svc: Services, model_id: int) -> list[BenchmarkRef]:
    """Every benchmark version of the model, newest first."""
    with svc.db.session() as session:
        rows = session.execute(
            select(BenchmarkSpec, DatasetVersion)
            .join(DatasetVersion, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(BenchmarkSpec.model_id == model_id)
            .order_by(DatasetVersion.version_number.desc(), BenchmarkSpec.created_at.desc())
        ).all()
    return [
        BenchmarkRef(
            spec.id,
            model_id,
            dv.version,
            dv.version_number,
            version_item(dv, benchmark_spec_id=spec.id),
            spec.target_column,
            tuple(spec.input_columns or ()),
            tuple(dv.columns or spec.columns or ()),
            spec.eval_split,
        )
        for spec, dv in rows
    ]


def model_task(svc: Services, model_id: int) -> tuple[str, Recipe]:
    """The model's task type and the recipe its label check trains (for a model with the
    owner's training code, `CHECK_ESTIMATORS`': cross-validating the owner's code would cost
    one sandboxed run per fold)."""
    with svc.db.session() as session:
        model = session.get(Model, model_id)
        if model is None:
            raise LookupError(f"model {model_id} not found")
        recipe = model_recipe(model)
        return model.task_type, recipe or Recipe(check_estimator(model.task_type, None))


def ensure_benchmark_fingerprints(svc: Services, ref: BenchmarkRef) -> str:
    """The key of the benchmark's fingerprints, building and storing them when missing.

    Benchmarks uploaded through the API are fingerprinted at upload; this covers the others
    (and any older than fingerprints). Building twice concurrently writes the same bytes.
    """
    key = ref.fingerprint_key
    if svc.store.exists(key):
        return key
    task_type, _ = model_task(svc, ref.model_id)
    tmp_root = svc.settings.data_dir / "tmp" / "fingerprints"
    tmp_root.mkdir(parents=True, exist_ok=True)
    with svc.store.local_path(ref.item.object_key) as path:
        columns = ref.columns or tuple(_file_columns(path, ref.item.file_format))
        handle, name = tempfile.mkstemp(dir=tmp_root, suffix=".fingerprints")
        os.close(handle)
        out = Path(name)
        try:
            summary = fingerprint_benchmark_file(
                path,
                ref.item.file_format,
                columns=columns,
                target_column=ref.target_column,
                input_columns=ref.input_columns,
                task_type=task_type,
                eval_split=ref.eval_split,
                out=out,
                tmp_root=tmp_root,
            )
            svc.store.put_file(key, out)
        finally:
            out.unlink(missing_ok=True)
    log.info(
        "model %s %s: fingerprinted %d benchmark rows", ref.model_id, ref.version, summary.rows
    )
    return key


def _file_columns(path: Path, file_format: str) -> list[str]:
    return [str(c) for c in read_dataset(path, file_format).columns]


@contextlib.contextmanager
def opened_fingerprints(svc: Services, key: str) -> Iterator[Fingerprints]:
    with svc.store.local_path(key) as path, open_fingerprints(path) as fingerprints:
        yield fingerprints


def benchmark_summary(svc: Services, key: str) -> FingerprintSummary:
    with svc.store.local_path(key) as path:
        return FingerprintSummary.from_json(read_footer(path))


def benchmark_sample(
    svc: Services, ref: BenchmarkRef, columns: Sequence[str], size: int
) -> pd.DataFrame:
    """A seeded uniform sample of a benchmark's rows (`columns` only), read batch by batch."""
    with svc.store.local_path(ref.item.object_key) as path:
        source = file_batches(path, ref.item.file_format, columns)
        for _ in range(len(columns) + 2):
            rng = np.random.default_rng(0)
            kept: pa.Table | None = None
            priorities = np.empty(0)
            try:
                for batch in source():
                    table = pa.Table.from_batches([batch])
                    draws = rng.random(table.num_rows)
                    if kept is not None:
                        table = pa.concat_tables([kept, table.cast(kept.schema)])
                        draws = np.concatenate([priorities, draws])
                    if table.num_rows > size:
                        keep = np.sort(np.argpartition(draws, size)[:size])
                        table, draws = table.take(pa.array(keep)), draws[keep]
                    kept, priorities = table, draws
            except RetypeColumns:
                continue  # a CSV column turned out to be text: read again
            break
    if kept is None:
        return pd.DataFrame(columns=list(columns))
    return kept.to_pandas()
