"""Known rows: rows of a contribution that duplicate rows the model already trains on.

Rows that match rows of the model's training data — its accepted contributions
(`accepted_items`: any earlier accepted contribution, from anyone) and the owner's base training
data (the newest benchmark file's non-evaluation rows, `pipeline.evaluation.datasets`) — are
counted and left out of valuation (`novel_rows`): they earn nothing. A tier counts its matches
as known only when there are more of them than chance explains (its chance rate scaled to the
training data's size, `known_mask`): jittered or resampled copies of training rows are known,
while the coincidences of honest rows in a dense table are not. Rows sent by two contributions
of one batch are valued once, with the first (`batch_duplicates`).

Accepted rows' fingerprints are derived from the accepted versions when needed and cached per
version and scheme in the object store (`integrity/{model_id}/accepted/...`, outside
`datasets/`, so no arrival is triggered), the base data's per benchmark version and scheme
(`integrity/{model_id}/{version}/base-...`); the cache is written atomically and is a pure
function of an immutable version, so concurrent runs can only write the same bytes, and which
versions count is read from the database each time.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pipeline.checks.benchmark_fingerprints import (
    PREFIX,
    BenchmarkRef,
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
from pipeline.evaluation.datasets import accepted_items, benchmark_base_rows

if TYPE_CHECKING:
    from pipeline.services import Services

log = logging.getLogger(__name__)


def accepted_keys_key(model_id: int, dataset_version_id: int, scheme: Scheme) -> str:
    return f"{PREFIX}/{model_id}/accepted/{dataset_version_id}-{scheme.digest}.npy"


def base_keys_key(ref: BenchmarkRef, scheme: Scheme) -> str:
    return f"{PREFIX}/{ref.model_id}/{ref.version}/base-{scheme.digest}.npy"


@dataclass(frozen=True)
class AcceptedKeys:
    """The distinct keys of the rows the model trains on under one scheme, per tier: accepted
    contributions and base data together (`tier_keys`), and the base data alone."""

    scheme: Scheme
    rows: int
    tier_keys: list[np.ndarray]
    base_rows: int = 0
    base_tier_keys: list[np.ndarray] | None = None


def accepted_row_keys(svc: Services, item: VersionItem, scheme: Scheme) -> np.ndarray:
    """(rows, tiers) keys of one accepted version's rows; cached in the object store."""
    key = accepted_keys_key(item.model_id, item.dataset_version_id, scheme)
    return _cached_keys(svc, key, scheme, lambda: load_frame(svc.store, item))


def base_row_keys(svc: Services, ref: BenchmarkRef, scheme: Scheme) -> np.ndarray:
    """(rows, tiers) keys of a benchmark version's base rows; cached in the object store."""

    def base() -> pd.DataFrame:
        return benchmark_base_rows(load_frame(svc.store, ref.item), ref.eval_split)

    return _cached_keys(svc, base_keys_key(ref, scheme), scheme, base)


def _cached_keys(
    svc: Services, key: str, scheme: Scheme, frame: Callable[[], pd.DataFrame]
) -> np.ndarray:
    """The (rows, tiers) keys cached under `key`, computed from `frame()` when missing."""
    if svc.store.exists(key):
        try:
            with svc.store.open(key) as fh:
                cached = np.load(io.BytesIO(fh.read()), allow_pickle=False)
            if cached.ndim == 2 and cached.shape[1] == len(scheme.tiers):
                return np.asarray(cached, dtype=np.uint64)
        except (OSError, ValueError):
            log.warning("ignoring an unreadable fingerprint cache %s", key)
    rows = frame()
    tiers = len(scheme.tiers)
    if rows.empty:
        table = np.empty((0, tiers), dtype=np.uint64)
    else:
        keys = frame_keys(scheme, rows, probes=False)
        table = np.column_stack([keys.keys(t) for t in range(tiers)])
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
    """The distinct keys of the rows the model trains on: its accepted rows (the contribution
    `exclude_job` aside) and the newest benchmark's base rows."""
    tables = [
        accepted_row_keys(svc, item, scheme)
        for item in accepted_items(svc.db, model_id, exclude=(exclude_job,))
    ]
    refs = model_benchmarks(svc, model_id)
    base = base_row_keys(svc, refs[0], scheme) if refs else None
    tiers = len(scheme.tiers)
    if base is not None and len(base):
        tables.append(base)
    if not tables:
        return AcceptedKeys(scheme, 0, [np.empty(0, dtype=np.uint64) for _ in range(tiers)])
    stacked = np.concatenate(tables)
    return AcceptedKeys(
        scheme,
        len(stacked),
        [np.unique(stacked[:, t]) for t in range(tiers)],
        len(base) if base is not None else 0,
        [np.unique(base[:, t]) for t in range(tiers)] if base is not None and len(base) else None,
    )


def known_mask(keys: RowKeys, accepted: AcceptedKeys, benchmark: FingerprintSummary) -> np.ndarray:
    """Rows matching training rows in a tier whose matches are more than chance explains.

    A tier's chance rate (the benchmark's self-match rate, scaled to the training data's size)
    says how many honest rows match training rows there by coincidence. When the contribution
    matches more often than `chance_allowance` allows (no tolerance), its matches there are
    copies (exact, jittered or resampled) and count as known; otherwise they are coincidences
    of honest rows and none does. Where chance matches are very rare (e.g. the exact tier of
    continuous data) a few matches are enough.
    """
    return _matching(keys, accepted, benchmark, accepted.tier_keys)


def known_base_mask(
    keys: RowKeys, accepted: AcceptedKeys, benchmark: FingerprintSummary
) -> np.ndarray:
    """The rows of `known_mask` that match the owner's base training data."""
    return _matching(keys, accepted, benchmark, accepted.base_tier_keys)


def _matching(
    keys: RowKeys,
    accepted: AcceptedKeys,
    benchmark: FingerprintSummary,
    tier_keys: list[np.ndarray] | None,
) -> np.ndarray:
    known = np.zeros(keys.rows, dtype=bool)
    if accepted.rows == 0 or keys.rows == 0 or tier_keys is None:
        return known
    scale = accepted.rows / max(1, benchmark.rows)
    sample = max(1, benchmark.sample_rows)
    matched = match_rows(keys, tier_keys)
    # Finest tier first: rows a finer tier already found to be copies do not make a coarser
    # tier's chance coincidences among the other rows look like copies too (a contribution
    # half copied and half honest keeps its honest half).
    order = sorted(range(len(benchmark.tiers)), key=lambda t: benchmark.tiers[t].chance_rate)
    for tier in order:
        # Laplace's rule of succession: a rate measured as 0 on a sample is not quite 0.
        measured = (benchmark.tiers[tier].chance_rate * sample + 1) / (sample + 2)
        chance = min(1.0, measured * scale)
        hits = matched[tier] & ~known
        if hits.sum() > chance_allowance(int((~known).sum()), chance, 0.0):
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
