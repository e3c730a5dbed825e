"""The cache of a model's "without" side: the benchmark predictions of the model trained on its
accepted state, kept in the object store across runs and restarts.

"Without" changes only when the model's accepted state does, so a batch of one trains one model
(the one with the contribution) instead of two. The key is a digest of named parts
(`without_key`): the accepted versions, the benchmark version, the recipe (estimator, task,
target, inputs, metric, library version, paired fits) and the seed. `model_state_key` gathers them;
a new part (a base data version, a trainer hash) is one more keyword there. Any change of a part
changes the digest: the stored entry no longer matches and the next evaluation trains "without"
again (a miss) and replaces it.

Stored: one Parquet object per model, `valuation-cache/{model_id}/without.parquet` (the model id
is in the path and in the digest, so one model never reads another's entry), holding the
per-row predictions (K blocks of the benchmark rows for a model of K paired fits) and, in its
metadata, the digest, the benchmark classes and K when above one. No pickle: the
entry is data, checked against the benchmark it is read for. A cache that cannot be read or
written is a miss, logged, never a failed evaluation.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.core.tables import BenchmarkSpec
from pipeline.evaluation.batches import VersionItem
from pipeline.evaluation.metrics import Predictions
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.estimators import RANDOM_STATE
from pipeline.models.paired_fits import PAIRED_SCHEME
from pipeline.models.row_keys import KEY_SCHEME
from pipeline.store.objectstore import ObjectStore

log = logging.getLogger(__name__)

_META = b"marketplace.without"
FORMAT = "1"


@dataclass(frozen=True)
class WithoutKey:
    """A model's accepted state, as named parts; `digest` identifies it."""

    model_id: int
    parts: tuple[tuple[str, str], ...]

    @property
    def digest(self) -> str:
        payload = json.dumps({"model": self.model_id, **dict(self.parts)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    @property
    def object_key(self) -> str:
        return without_object_key(self.model_id)


def without_key(model_id: int, **parts: str) -> WithoutKey:
    """The key of a model's "without" side from its named parts (any number of them)."""
    return WithoutKey(model_id, tuple(sorted(parts.items())))


def without_object_key(model_id: int) -> str:
    return f"valuation-cache/{int(model_id)}/without.parquet"


def model_state_key(
    model_id: int,
    spec: BenchmarkSpec,
    accepted: Sequence[VersionItem],
    scorer: BenchmarkScorer,
) -> WithoutKey:
    """The key of the model trained on the `accepted` versions, scored on `spec`."""
    versions = [f"{i.dataset_version_id}:{i.version}:{i.object_key}" for i in accepted]
    return without_key(
        model_id,
        accepted=_digest(sorted(versions)),
        benchmark=f"{spec.id}:{spec.dataset_version_id}:{spec.eval_split}",
        recipe=recipe_digest(scorer),
        seed=str(RANDOM_STATE),
    )


def trained_as_accepted(
    before: Sequence[VersionItem], added: Sequence[VersionItem], now: Sequence[VersionItem]
) -> bool:
    """Whether the accepted versions `now` are `before` followed by `added`, in that order: the
    rows a model trained on `before` plus `added` is trained on, in its order."""
    ids = [i.dataset_version_id for i in (*before, *added)]
    return ids == [i.dataset_version_id for i in now]


def recipe_digest(scorer: BenchmarkScorer) -> str:
    """How the model is trained and scored: a new recipe (estimator, parameters,
    preprocessing), owner's training code, target, input list, metric, scikit-learn release,
    row-key scheme or number of paired fits is another model."""
    import sklearn  # lazily: only evaluations need it

    recipe = json.dumps(scorer.recipe.to_json(), sort_keys=True) if scorer.recipe else ""
    trainer = f"trainer {scorer.trainer.entry}@{scorer.trainer.sha256}" if scorer.trainer else ""
    return _digest(
        [
            scorer.task_type,
            recipe,
            trainer,
            scorer.target_column,
            ",".join(scorer.input_columns),
            scorer.metric.name,
            f"scikit-learn {sklearn.__version__}",
            KEY_SCHEME,
            # Only with paired fits, so a model of one fit keeps the digest it always had.
            *(
                [f"paired fits {scorer.paired_fits} ({PAIRED_SCHEME})"]
                if scorer.paired_fits > 1
                else []
            ),
        ]
    )


def _digest(values: Sequence[str]) -> str:
    return hashlib.sha256("\x1f".join(values).encode()).hexdigest()


class WithoutCache:
    """Read and write a model's "without" predictions in the object store."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def get(self, key: WithoutKey, scorer: BenchmarkScorer) -> Predictions | None:
        """The stored predictions for `key`, or None (absent, stale, or not for this benchmark)."""
        try:
            if not self.store.exists(key.object_key):
                return None
            with self.store.open(key.object_key) as fh:
                data = fh.read()
            return _decode(data, key, scorer)
        except Exception:
            log.warning("without cache of model %s unreadable; retraining", key.model_id)
            return None

    def put(self, key: WithoutKey, predictions: Predictions) -> bool:
        """Store `predictions` under `key`, replacing the model's previous entry."""
        try:
            self.store.put_bytes(key.object_key, _encode(predictions, key))
        except Exception:
            log.warning("without cache of model %s not written", key.model_id, exc_info=True)
            return False
        return True


def _encode(predictions: Predictions, key: WithoutKey) -> bytes:
    import pyarrow as pa  # lazily: only evaluations need it
    import pyarrow.parquet as pq

    outputs = np.asarray(predictions.outputs)
    columns: dict[str, Any] = {"y_true": predictions.y_true}
    if outputs.ndim == 2:
        columns.update({f"output_{j}": outputs[:, j] for j in range(outputs.shape[1])})
    else:
        columns["output"] = outputs
    meta = {
        "format": FORMAT,
        "digest": key.digest,
        "model_id": key.model_id,
        "metric": predictions.metric_name,
        "classes": [c.item() if isinstance(c, np.generic) else c for c in predictions.classes],
    }
    if predictions.copies > 1:
        meta["copies"] = predictions.copies  # absent for one fit: that entry is as it was
    table = pa.table(columns).replace_schema_metadata({_META: json.dumps(meta).encode()})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def _decode(data: bytes, key: WithoutKey, scorer: BenchmarkScorer) -> Predictions | None:
    import pyarrow.parquet as pq  # lazily: only evaluations need it

    table = pq.read_table(io.BytesIO(data))
    meta = json.loads((table.schema.metadata or {}).get(_META, b"{}"))
    if meta.get("format") != FORMAT or meta.get("digest") != key.digest:
        return None
    if meta.get("model_id") != key.model_id or meta.get("metric") != scorer.metric.name:
        return None
    copies = meta.get("copies", 1)
    if copies != scorer.paired_fits:
        return None  # another number of paired fits: another model
    expected = scorer.y_true if copies == 1 else np.tile(scorer.y_true, copies)
    y_true = table.column("y_true").to_numpy(zero_copy_only=False)
    if len(y_true) != len(expected) or not np.array_equal(y_true, expected):
        return None  # another benchmark's rows: never scored against this one
    names = table.column_names
    if "output" in names:
        outputs = table.column("output").to_numpy(zero_copy_only=False)
    else:
        count = sum(n.startswith("output_") for n in names)
        outputs = np.column_stack(
            [table.column(f"output_{j}").to_numpy(zero_copy_only=False) for j in range(count)]
        )
    return Predictions(scorer.metric.name, expected, outputs, scorer.classes, copies)
