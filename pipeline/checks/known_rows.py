"""Known rows: rows of a contribution that duplicate rows the model has already accepted.

Rows that match rows of the model's accepted training data (`accepted_items`: any earlier
accepted contribution, from anyone) are counted and left out of valuation (`novel_rows`). A
tier counts its matches as known only when there are more of them than chance explains (its
chance rate scaled to the accepted data's size, `known_mask`): jittered or resampled copies of
accepted rows are known, while the coincidences of honest rows in a dense table are not. Rows
sent by two contributions of one batch are valued once, with the first (`batch_duplicates`).

Accepted rows' fingerprints are derived from the accepted versions when needed and cached per
version and scheme in the object store (`integrity/{model_id}/accepted/...`, outside
`datasets/`, so no arrival is triggered); the cache is written atomically and is a pure
function of an immutable version, so concurrent runs can only write the same bytes, and which
versions count is read from the database each time.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pipeline.checks.benchmark_fingerprints import (
    PREFIX,
    benchmark_summary,
    ensure_benchmark_fingerprints,
    model_benchmarks,
)
from pipeline.checks.fingerprint_files import FingerprintSummary
from pipeline.checks.fingerprints import (
    RowKeys,
    Scheme,
    chance_allowance,
    frame_keys,
    match_rows,
)
from pipeline.evaluation.batches import VersionItem, load_frame
from pipeline.evaluation.datasets import accepted_items

if TYPE_CHECKING:
    from pipeline.bootstrap import Services

log = logging.getLogger(__name__)


def accepted_keys_key(model_id: int, dataset_version_id: int, scheme: Scheme) -> str:
    return f"{PREFIX}/{model_id}/accepted/{dataset_version_id}-{scheme.digest}.npy"


@dataclass(frozen=True)
class AcceptedKeys:
    """The distinct keys of the model's accepted rows under one scheme, per tier."""

    scheme: Scheme
    rows: int
    tier_keys: list[np.ndarray]


def accepted_row_keys(svc: Services, item: VersionItem, scheme: Scheme) -> np.ndarray:
    """(rows, tiers) keys of one accepted version's rows; cached in the object store."""
    key = accepted_keys_key(item.model_id, item.dataset_version_id, scheme)
    if svc.store.exists(key):
        try:
            with svc.store.open(key) as fh:
                cached = np.load(io.BytesIO(fh.read()), allow_pickle=False)
            if cached.ndim == 2 and cached.shape[1] == len(scheme.tiers):
                return np.asarray(cached, dtype=np.uint64)
        except (OSError, ValueError):
            log.warning("ignoring an unreadable fingerprint cache %s", key)
    keys = frame_keys(scheme, load_frame(svc.store, item), probes=False)
    table = np.column_stack([keys.keys(t) for t in range(len(scheme.tiers))])
    buffer = io.BytesIO()
    np.save(buffer, table, allow_pickle=False)
    svc.store.put_bytes(key, buffer.getvalue())
    return table


def record_accepted_fingerprints(svc: Services, item: VersionItem) -> None:
    """Cache an accepted version's fingerprints now (optional: they are built when needed)."""
    refs = model_benchmarks(svc, item.model_id)
    if refs:
        summary = benchmark_summary(svc, ensure_benchmark_fingerprints(svc, refs[0]))
        accepted_row_keys(svc, item, summary.scheme)


def accepted_keys(
    svc: Services, model_id: int, scheme: Scheme, *, exclude_job: str | None = None
) -> AcceptedKeys:
    """The distinct keys of the model's accepted rows, the contribution `exclude_job` aside."""
    tables = [
        accepted_row_keys(svc, item, scheme)
        for item in accepted_items(svc.db, model_id, exclude=(exclude_job,))
    ]
    tiers = len(scheme.tiers)
    if not tables:
        return AcceptedKeys(scheme, 0, [np.empty(0, dtype=np.uint64) for _ in range(tiers)])
    stacked = np.concatenate(tables)
    return AcceptedKeys(scheme, len(stacked), [np.unique(stacked[:, t]) for t in range(tiers)])


def known_mask(keys: RowKeys, accepted: AcceptedKeys, benchmark: FingerprintSummary) -> np.ndarray:
    """Rows matching accepted rows in a tier whose matches are more than chance explains.

    A tier's chance rate (the benchmark's self-match rate, scaled to the accepted data's size)
    says how many honest rows match accepted rows there by coincidence. When the contribution
    matches more often than `chance_allowance` allows (no tolerance), its matches there are
    copies (exact, jittered or resampled) and count as known; otherwise they are coincidences
    of honest rows and none does. Where chance matches are very rare (e.g. the exact tier of
    continuous data) a few matches are enough.
    """
    known = np.zeros(keys.rows, dtype=bool)
    if accepted.rows == 0 or keys.rows == 0:
        return known
    scale = accepted.rows / max(1, benchmark.rows)
    sample = max(1, benchmark.sample_rows)
    matched = match_rows(keys, accepted.tier_keys)
    for tier, summary in enumerate(benchmark.tiers):
        # Laplace's rule of succession: a rate measured as 0 on a sample is not quite 0.
        measured = (summary.chance_rate * sample + 1) / (sample + 2)
        chance = min(1.0, measured * scale)
        hits = matched[tier]
        if hits.sum() > chance_allowance(keys.rows, chance, 0.0):
            known |= hits
    return known


def batch_duplicates(
    svc: Services, model_id: int, frames: Sequence[pd.DataFrame]
) -> list[np.ndarray]:
    """Per frame, its rows that an earlier frame of the batch holds too (canonical cells).

    Frames are in submission order; a frame identical to an earlier one is left whole (the
    valuation treats identical contributions as one player and splits its value), any other
    row seen before is a duplicate of the first contribution that sent it.
    """
    refs = model_benchmarks(svc, model_id)
    if not refs or len(frames) < 2:
        return [np.zeros(len(f), dtype=bool) for f in frames]
    scheme = benchmark_summary(svc, ensure_benchmark_fingerprints(svc, refs[0])).scheme
    seen: set[int] = set()
    whole: dict[bytes, set[int]] = {}
    masks = []
    for frame in frames:
        keys = frame_keys(scheme, frame, probes=False).keys(0)
        signature = np.sort(keys).tobytes()
        if signature in whole:
            masks.append(np.zeros(len(frame), dtype=bool))
            continue
        masks.append(np.isin(keys, np.fromiter(seen, dtype=np.uint64, count=len(seen))))
        whole[signature] = set(keys.tolist())
        seen |= whole[signature]
    return masks


@dataclass(frozen=True)
class NovelRows:
    """A contribution's rows without those already accepted for the model."""

    frame: pd.DataFrame
    known: int
    total: int

    @property
    def novel(self) -> int:
        return self.total - self.known

    @property
    def novel_share(self) -> float:
        return self.novel / self.total if self.total else 0.0


def novel_rows(
    svc: Services, model_id: int, frame: pd.DataFrame, *, exclude_job: str | None = None
) -> NovelRows:
    """`frame` without the rows that duplicate the model's accepted rows, and how many left.

    Accepted rows are read from the database at the call (`accepted_items`), the contribution
    `exclude_job` left out. Without a benchmark there is no scheme to compare rows in, and
    nothing is dropped.
    """
    refs = model_benchmarks(svc, model_id)
    if not refs or frame.empty:
        return NovelRows(frame, 0, len(frame))
    summary = benchmark_summary(svc, ensure_benchmark_fingerprints(svc, refs[0]))
    keys = frame_keys(summary.scheme, frame)
    accepted = accepted_keys(svc, model_id, summary.scheme, exclude_job=exclude_job)
    known = known_mask(keys, accepted, summary)
    return NovelRows(frame[~known].reset_index(drop=True), int(known.sum()), len(frame))
