"""Row fingerprints: a canonical form of table rows, hashed at several resolutions.

A row is fingerprinted over a fixed list of columns (a benchmark's input columns, then its
target). Each cell is first put in canonical form, so that one value written differently
hashes the same:

- missing: null, NaN, an empty or blank string, `NA`/`null`/`none`;
- a number: a numeric or boolean cell, or text that parses as a finite number (`1`, `1.0`,
  ` 1e0 `, `True` are all 1.0); -0.0 is 0.0; ±inf is the text `inf`/`-inf`;
- text: anything else, NFKC-normalised, trimmed and case-folded.

Every row gets one 64-bit key per *tier*:

- `exact`: numbers rounded to 23 mantissa bits (IEEE single precision, about 7 significant
  digits), so `1`, `1.0`, `1.00000001` are one value;
- `near_W` for each width W in `NEAR_WIDTHS`: each number's cell on a grid in standardised
  units, `floor((x - mean) / (scale * W))`, with the column's mean and standard deviation
  (`scale`) from the first `STATS_ROWS` rows of the reference.

Text cells and, for classification, the target are exact in every tier; a regression target is
gridded like a feature.

A grid alone misses a noisy copy whose value lies across a cell boundary from the original. A
query row is therefore also looked up in the neighbouring cell of every numeric column where it
lies within `PROBE_MARGIN` of a cell width from a boundary (the `MAX_PROBE_COLUMNS` closest such
columns: at most 2^8 keys per row and tier). A row within `PROBE_MARGIN * W` standard deviations
of a reference row in every numeric column, and equal in every other column, is always found
(if more than `MAX_PROBE_COLUMNS` columns lie that close to a boundary, the closest are probed
and it is very likely found); a row up to one cell width away may match too: that is the grid's
granularity.

Keys are polynomial hashes of the cells, `sum(cell_j * P^(d-1-j)) mod 2^64`, finished by
MurmurHash3's 64-bit mixer; a neighbouring cell's key is the mixer of the raw sum plus or minus
one power of P, so probing is cheap. Exact number bits are scrambled per column before the sum,
so that no linear relation between columns makes two rows collide.

How often the reference's own rows match each other in a tier (its *chance rate*, measured on a
reservoir sample of `CHANCE_SAMPLE_ROWS` rows probed against the whole reference) says how much
a match means there: in a dense, low-dimensional table a coarse cell holds many honest rows.
`pipeline.checks.integrity` weighs matches by it.

A reference's fingerprints are stored as one file: each tier's sorted, distinct keys (uint64),
a JSON footer (the scheme: columns, statistics, widths; rows; tier figures), the footer's
length and a magic. They are built from a stream of record batches with bounded memory: keys go
to per-tier partition files by their top bits and each partition is sorted on its own, so a
500 MB benchmark needs a few MB of keys in memory at a time. Only keys and these statistics are
kept, never values.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipeline.checks.canonical_cells import (
    NUMBER,
    TEXT,
    CanonicalColumn,
    arrow_column,
    canonical_column,
)
from pipeline.evaluation.datasets import SPLIT_COLUMN

SCHEME_VERSION = 1
EXACT = "exact"
# Cell widths of the near tiers, in standard deviations of each column.
NEAR_WIDTHS = (0.5, 0.05, 0.005)
# A column is probed across a boundary when the row lies this close to it (share of the cell
# width); at most MAX_PROBE_COLUMNS columns per row, the closest first.
PROBE_MARGIN = 0.1
MAX_PROBE_COLUMNS = 8
# Query rows are probed in chunks, bounding the (rows x 2^MAX_PROBE_COLUMNS) key matrix.
QUERY_CHUNK_ROWS = 2_048
_U64 = np.uint64
_MASK = (1 << 64) - 1
_M1 = _U64(0xFF51AFD7ED558CCD)
_M2 = _U64(0xC4CEB9FE1A85EC53)
_P = 0x9E3779B97F4A7C15  # odd: the polynomial's base
_MISSING_CODE = _U64(0x6A09E667F3BCC909)


def near_tier_name(width: float) -> str:
    return f"near_{width:g}"


# --- hashing --------------------------------------------------------------------------------


def _mix(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser over a uint64 array (a new array)."""
    x = values ^ (values >> _U64(33))
    x *= _M1
    x ^= x >> _U64(33)
    x *= _M2
    x ^= x >> _U64(33)
    return np.asarray(x)


def _column_constant(*parts: object) -> np.uint64:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return _U64(int.from_bytes(digest, "little") | 1)


# --- the scheme: columns, statistics, grids --------------------------------------------------


@dataclass(frozen=True)
class Scheme:
    """What a set of fingerprints was made with; queries must use the same scheme."""

    columns: tuple[str, ...]  # input columns, then the target
    target: str
    classification: bool
    means: tuple[float, ...]
    scales: tuple[float, ...]
    widths: tuple[float, ...] = NEAR_WIDTHS
    margin: float = PROBE_MARGIN
    version: int = SCHEME_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Scheme:
        return cls(
            columns=tuple(str(c) for c in data["columns"]),
            target=str(data["target"]),
            classification=bool(data["classification"]),
            means=tuple(float(v) for v in data["means"]),
            scales=tuple(float(v) for v in data["scales"]),
            widths=tuple(float(v) for v in data["widths"]),
            margin=float(data["margin"]),
            version=int(data["version"]),
        )

    @property
    def digest(self) -> str:
        """A short id of the scheme (names cached fingerprints made with it)."""
        text = json.dumps(self.to_json(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def tiers(self) -> list[str]:
        return [EXACT, *(near_tier_name(w) for w in self.widths)]

    @property
    def features(self) -> tuple[str, ...]:
        return tuple(c for c in self.columns if c != self.target)

    def gridded(self, index: int) -> bool:
        """Whether column `index` lies on the near grids (else it is exact in every tier)."""
        return not (self.classification and self.columns[index] == self.target)


def fingerprint_columns(
    columns: Sequence[str], target: str, input_columns: Sequence[str] = ()
) -> tuple[str, ...]:
    """The declared input columns (else every column but the target and `split`), target last."""

    inputs = [c for c in input_columns if c != target] or [
        c for c in columns if c not in (target, SPLIT_COLUMN)
    ]
    return (*dict.fromkeys(inputs), target)


def scheme_from_sample(
    cells: Sequence[CanonicalColumn], columns: Sequence[str], target: str, classification: bool
) -> Scheme:
    """Means and scales (standard deviation; else |mean|; else 1) of each column's numbers."""
    means, scales = [], []
    for column in cells:
        values = column.number[column.kind == NUMBER]
        mean = float(values.mean()) if len(values) else 0.0
        std = float(values.std()) if len(values) > 1 else 0.0
        if not (math.isfinite(mean) and math.isfinite(std)):
            mean, std = 0.0, 0.0
        scale = std if std > 0 else (abs(mean) if mean != 0 else 1.0)
        means.append(mean)
        scales.append(scale)
    return Scheme(tuple(columns), target, classification, tuple(means), tuple(scales))


# --- keys -----------------------------------------------------------------------------------


@dataclass
class RowKeys:
    """Each row's raw polynomial per tier, and what probing neighbouring cells needs."""

    raw: list[np.ndarray]  # per tier, uint64 (rows,): the sum before mixing
    distance: list[np.ndarray]  # per near tier, float (rows, gridded columns); inf: no probe
    delta: list[np.ndarray]  # per near tier, uint64 (rows, gridded columns): ±P^k

    @property
    def rows(self) -> int:
        return len(self.raw[0]) if self.raw else 0

    def keys(self, tier: int) -> np.ndarray:
        return _mix(self.raw[tier])

    def with_target(self, own: np.ndarray, code: np.uint64) -> RowKeys:
        """The same rows with the target cell's code `code` in place of `own` (per row).

        The target is the last column, so its code is the raw sum's constant term: swapping it
        is one subtraction and one addition (mod 2^64). Only for a target that is exact in every
        tier (classification), where probing never moves the target.
        """
        return RowKeys(
            [raw - own + code for raw in self.raw],  # uint64 arithmetic wraps, as the sum does
            self.distance,
            self.delta,
        )

    def take(self, rows: np.ndarray) -> RowKeys:
        return RowKeys(
            [r[rows] for r in self.raw],
            [d[rows] for d in self.distance],
            [d[rows] for d in self.delta],
        )

    def probes(self, tier: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(rows, 2^k) keys of the rows' own cells and neighbouring cells in `tier`."""
        base = self.raw[tier][start:stop]
        if tier == 0 or not self.distance[tier - 1].shape[1]:
            return _mix(base)[:, None]
        distance = self.distance[tier - 1][start:stop]
        width = int(min(MAX_PROBE_COLUMNS, np.isfinite(distance).sum(axis=1).max(initial=0)))
        probes = base[:, None]
        if width:
            order = np.argsort(distance, axis=1, kind="stable")[:, :width]
            chosen = np.take_along_axis(self.delta[tier - 1][start:stop], order, axis=1)
            chosen[~np.isfinite(np.take_along_axis(distance, order, axis=1))] = 0
            for k in range(width):
                probes = np.concatenate([probes, probes + chosen[:, k : k + 1]], axis=1)
        return _mix(probes)


def _power(k: int, sign: int = 1) -> np.uint64:
    return _U64((sign * pow(_P, k, 1 << 64)) & _MASK)


def row_keys(
    scheme: Scheme, cells: Sequence[CanonicalColumn | None], *, probes: bool = False
) -> RowKeys:
    """Keys of rows whose canonical columns are `cells` (None: a column the rows lack)."""
    n = next((len(c.kind) for c in cells if c is not None), 0)
    d = len(scheme.columns)
    tiers = 1 + len(scheme.widths)
    raw = [np.zeros(n, dtype=_U64) for _ in range(tiers)]
    distances: list[list[np.ndarray]] = [[] for _ in scheme.widths]
    deltas: list[list[np.ndarray]] = [[] for _ in scheme.widths]
    p = _U64(_P)
    for index in range(d):
        column = cells[index] if index < len(cells) else None
        if column is None:
            for tier in range(tiers):
                raw[tier] *= p
                raw[tier] += _MISSING_CODE
            continue
        number = column.kind == NUMBER
        other = None
        if not bool(number.all()):
            other = np.where(column.kind == TEXT, column.token, _MISSING_CODE)
        exact = _exact_code(column, index, number, other)
        raw[0] *= p
        raw[0] += exact
        if not scheme.gridded(index):
            for tier in range(1, tiers):
                raw[tier] *= p
                raw[tier] += exact
            continue
        z = (column.number - scheme.means[index]) * (1.0 / scheme.scales[index])
        power, minus = _power(d - 1 - index), _power(d - 1 - index, -1)
        for tier, width in enumerate(scheme.widths, start=1):
            scaled = np.clip(z * (1.0 / width), -(2.0**62), 2.0**62)
            floor = np.floor(scaled)
            code = floor.astype(np.int64).view(_U64)
            if other is not None:
                code = np.where(number, code, other)
            raw[tier] *= p
            raw[tier] += code
            if probes:
                frac = scaled - floor
                up = frac >= 0.5
                distance = np.where(up, 1.0 - frac, frac)
                distances[tier - 1].append(
                    np.where(number & (distance < scheme.margin), distance, np.inf)
                )
                deltas[tier - 1].append(np.where(up, power, minus))
    return RowKeys(
        raw,
        [np.column_stack(x) if x else np.empty((n, 0)) for x in distances],
        [np.column_stack(x) if x else np.empty((n, 0), dtype=_U64) for x in deltas],
    )


def _exact_code(
    column: CanonicalColumn, index: int, number: np.ndarray, other: np.ndarray | None
) -> np.ndarray:
    """A column's cell codes in the exact tier: numbers with 23 mantissa bits kept (rounded half
    up on the bit pattern, carrying into the exponent), scrambled per column; `other` (text
    tokens and the missing code) where a cell is not a number."""
    bits = column.number.view(_U64)
    exact = (bits + _U64(1 << 28)) & ~_U64((1 << 29) - 1)
    exact ^= exact >> _U64(31)
    exact *= _column_constant("exact", index)
    exact ^= exact >> _U64(29)
    if other is not None:
        exact = np.where(number, exact, other)
    return np.asarray(exact)


def frame_cells(scheme: Scheme, frame: pd.DataFrame) -> list[CanonicalColumn | None]:
    cells: list[CanonicalColumn | None] = []
    for name in scheme.columns:
        if name not in frame.columns:
            cells.append(None)
            continue
        series = frame[name]
        if not hasattr(series, "dtype"):  # a duplicated column name: the first
            series = series.iloc[:, 0]
        cells.append(canonical_column(arrow_column(series)))
    return cells


def target_codes(scheme: Scheme, frame: pd.DataFrame) -> np.ndarray:
    """Each row's target code as `row_keys` adds it (a classification target: exact in every
    tier); the missing code when the frame has no target column."""
    column = frame_cells(scheme, frame)[-1]
    if column is None:
        return np.full(len(frame), _MISSING_CODE, dtype=_U64)
    number = column.kind == NUMBER
    other = None
    if not bool(number.all()):
        other = np.where(column.kind == TEXT, column.token, _MISSING_CODE)
    return _exact_code(column, len(scheme.columns) - 1, number, other)


def frame_keys(scheme: Scheme, frame: pd.DataFrame, *, probes: bool = True) -> RowKeys:
    """Keys (with probe data) of a pandas frame's rows under `scheme`."""
    cells = frame_cells(scheme, frame)
    if all(c is None for c in cells):
        cells[0] = CanonicalColumn.missing(len(frame))
    return row_keys(scheme, cells, probes=probes)


# --- matching -------------------------------------------------------------------------------

# Honest samples of related distributions (another seed, noise-free labels, another class
# mix) match a benchmark up to this many times as often as its own rows match each other:
# measured up to 1.31x on the demo data (docs/integrity.md, `python bench/lottery.py`).
CHANCE_SLACK = 1.5


def chance_allowance(rows: int, chance_rate: float, tolerance: float) -> float:
    """Matching rows an honest contribution of `rows` rows may show in a tier.

    The rate expected by chance is the benchmark's self-match rate, widened by CHANCE_SLACK
    (an estimate from one sample, and honest data is seldom distributed exactly like the
    benchmark), plus three binomial standard deviations and the tolerance.
    """
    p = min(1.0, max(0.0, chance_rate) * CHANCE_SLACK)
    return rows * p + 3 * math.sqrt(rows * p * (1 - p)) + tolerance * rows


def contains(sorted_keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Which `queries` are in `sorted_keys` (ascending uint64, possibly memory-mapped)."""
    if len(sorted_keys) == 0 or queries.size == 0:
        return np.zeros(queries.shape, dtype=bool)
    flat = queries.ravel()
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    index = np.searchsorted(sorted_keys, ordered)
    index[index >= len(sorted_keys)] = len(sorted_keys) - 1
    found = np.empty(flat.shape, dtype=bool)
    found[order] = np.asarray(sorted_keys[index]) == ordered
    return found.reshape(queries.shape)


def match_rows(query: RowKeys, tier_keys: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per tier, which query rows have a key (own or neighbouring cell) in the reference."""
    matched = []
    for tier, reference in enumerate(tier_keys):
        hits = np.zeros(query.rows, dtype=bool)
        for start in range(0, query.rows, QUERY_CHUNK_ROWS):
            stop = min(query.rows, start + QUERY_CHUNK_ROWS)
            hits[start:stop] = contains(reference, query.probes(tier, start, stop)).any(axis=1)
        matched.append(hits)
    return matched


def self_matches(keys: RowKeys, rows: np.ndarray) -> list[np.ndarray]:
    """Per tier, which of `rows` match another row of the same `keys` (own cell or a neighbour)."""
    matched = []
    for tier in range(len(keys.raw)):
        own = keys.keys(tier)
        distinct, counts = np.unique(own, return_counts=True)
        sample = keys.take(rows)
        probes = sample.probes(tier)
        own_sample = own[rows]
        hit = counts[np.searchsorted(distinct, own_sample)] > 1
        others = probes != own_sample[:, None]
        hit |= (contains(distinct, probes) & others).any(axis=1)
        matched.append(hit)
    return matched
