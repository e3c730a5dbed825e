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

import contextlib
import hashlib
import json
import math
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.evaluation.datasets import SPLIT_COLUMN

if TYPE_CHECKING:
    import pandas as pd

SCHEME_VERSION = 1
EXACT = "exact"
# Cell widths of the near tiers, in standard deviations of each column.
NEAR_WIDTHS = (0.5, 0.05, 0.005)
# A column is probed across a boundary when the row lies this close to it (share of the cell
# width); at most MAX_PROBE_COLUMNS columns per row, the closest first.
PROBE_MARGIN = 0.1
MAX_PROBE_COLUMNS = 8
# Means and scales come from the first rows of the reference; chance rates from a reservoir.
STATS_ROWS = 20_000
CHANCE_SAMPLE_ROWS = 2_000
SAMPLE_SEED = 20_240_611
# Keys are computed on groups of at least this many rows (several reader batches).
KEY_GROUP_ROWS = 65_536
# Query rows are probed in chunks, bounding the (rows x 2^MAX_PROBE_COLUMNS) key matrix.
QUERY_CHUNK_ROWS = 2_048
# Text columns with more distinct values than this per batch are parsed by Arrow first.
PARSE_IN_PYTHON_MAX = 50_000

PARTITION_BITS = 5
SPILL_BUFFER_BYTES = 32 * 1024
# Keys of a tier are sorted and written to the partitions this many at a time.
SPILL_KEYS = 256 * 1024
MAGIC = b"MKFPRNT1"
_U64 = np.uint64
_MASK = (1 << 64) - 1
_M1 = _U64(0xFF51AFD7ED558CCD)
_M2 = _U64(0xC4CEB9FE1A85EC53)
_P = 0x9E3779B97F4A7C15  # odd: the polynomial's base
_MISSING_CODE = _U64(0x6A09E667F3BCC909)
_NAN_TOKENS = {"", "nan", "-nan", "na", "n/a", "#n/a", "null", "none"}
_BOOL_WORDS = {"true": 1.0, "false": 0.0}


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


def _text_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def canonical_text(value: str) -> str:
    return unicodedata.normalize("NFKC", value).strip().casefold()


# --- canonical cells ------------------------------------------------------------------------

MISSING, NUMBER, TEXT = 0, 1, 2


@dataclass
class CanonicalColumn:
    """One column's cells: kind (MISSING, NUMBER, TEXT), number value, text token hash."""

    kind: np.ndarray  # uint8
    number: np.ndarray  # float64, 0.0 where not a number
    token: np.ndarray  # uint64, 0 where not text

    def take(self, rows: np.ndarray | slice) -> CanonicalColumn:
        return CanonicalColumn(self.kind[rows], self.number[rows], self.token[rows])

    @classmethod
    def missing(cls, rows: int) -> CanonicalColumn:
        return cls(np.zeros(rows, np.uint8), np.zeros(rows), np.zeros(rows, dtype=_U64))


def _from_numbers(values: np.ndarray, valid: np.ndarray | None) -> CanonicalColumn:
    """Numbers (`valid`: which cells hold one; None: all) as canonical cells."""
    n = len(values)
    if valid is not None and not valid.all():
        values = np.where(valid, values, np.nan)
    finite = np.isfinite(values)
    token = np.zeros(n, dtype=_U64)
    if finite.all():
        return CanonicalColumn(np.full(n, NUMBER, np.uint8), values + 0.0, token)
    kind = finite.astype(np.uint8)  # NUMBER is 1, MISSING 0
    infinite = np.isinf(values)
    if infinite.any():
        kind[infinite] = TEXT
        token[infinite] = np.where(
            values[infinite] > 0, _U64(_text_hash("inf")), _U64(_text_hash("-inf"))
        )
    number = np.where(finite, values, 0.0) + 0.0  # -0.0 becomes 0.0
    return CanonicalColumn(kind, number, token)


def _numbers(array: pa.Array) -> CanonicalColumn:
    """Canonical cells of a numeric or boolean Arrow array."""
    if not pa.types.is_float64(array.type):
        array = pc.cast(array, pa.float64())
    if array.null_count:
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        values = np.asarray(array.fill_null(0.0).to_numpy(zero_copy_only=False))
        return _from_numbers(values, valid)
    return _from_numbers(np.asarray(array.to_numpy(zero_copy_only=False)), None)


def _parse_text(value: str) -> tuple[int, float, int]:
    text = canonical_text(value)
    if text in _NAN_TOKENS:
        return MISSING, 0.0, 0
    if text in _BOOL_WORDS:
        return NUMBER, _BOOL_WORDS[text], 0
    try:
        number = float(text)
    except ValueError:
        return TEXT, 0.0, _text_hash(text)
    if math.isnan(number):
        return MISSING, 0.0, 0
    if math.isinf(number):
        return TEXT, 0.0, _text_hash("inf" if number > 0 else "-inf")
    return NUMBER, number + 0.0, 0


def _parse_dictionary(values: pa.Array) -> CanonicalColumn:
    """Canonical cells of distinct strings (one each), plus a last "missing" entry."""
    python = values.to_pylist()
    if len(python) > PARSE_IN_PYTHON_MAX:
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
            # Many distinct values that are all plain numbers: Arrow parses them at once.
            parsed = _numbers(pc.cast(pc.utf8_trim_whitespace(values), pa.float64()))
            return CanonicalColumn(
                np.append(parsed.kind, np.uint8(MISSING)),
                np.append(parsed.number, 0.0),
                np.append(parsed.token, _U64(0)),
            )
    cells = [_parse_text(v) if v is not None else (MISSING, 0.0, 0) for v in python]
    cells.append((MISSING, 0.0, 0))
    return CanonicalColumn(
        np.array([c[0] for c in cells], dtype=np.uint8),
        np.array([c[1] for c in cells], dtype=np.float64),
        np.array([c[2] for c in cells], dtype=_U64),
    )


def _from_dictionary(array: pa.DictionaryArray) -> CanonicalColumn:
    dictionary = array.dictionary
    if not (pa.types.is_string(dictionary.type) or pa.types.is_large_string(dictionary.type)):
        dictionary = pc.cast(dictionary, pa.string())
    table = _parse_dictionary(dictionary)
    indices = array.indices.fill_null(len(dictionary))
    index = np.asarray(indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return table.take(index)


def canonical_column(array: pa.Array | pa.ChunkedArray) -> CanonicalColumn:
    """The canonical cells of an Arrow column of any type (see the module docstring)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    kind = array.type
    if pa.types.is_dictionary(kind):
        return _from_dictionary(array)
    if pa.types.is_null(kind):
        return CanonicalColumn.missing(len(array))
    if (
        pa.types.is_boolean(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_decimal(kind)
    ):
        return _numbers(array)
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        array = pc.cast(array, pa.string())
    return _from_dictionary(pc.dictionary_encode(array))


def _arrow_column(series: pd.Series) -> pa.Array:
    """A pandas column as Arrow; a mixed object column becomes text (nulls kept)."""
    try:
        return pa.array(series, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        values = [None if _is_missing(v) else str(v) for v in series.tolist()]
        return pa.array(values, type=pa.string())


def _is_missing(value: Any) -> bool:
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


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
        all_numbers = bool(number.all())
        other = None
        if not all_numbers:
            other = np.where(column.kind == TEXT, column.token, _MISSING_CODE)
        # Exact: 23 mantissa bits kept (rounded half up on the bit pattern, carrying into the
        # exponent), scrambled per column.
        bits = column.number.view(_U64)
        exact = (bits + _U64(1 << 28)) & ~_U64((1 << 29) - 1)
        exact ^= exact >> _U64(31)
        exact *= _column_constant("exact", index)
        exact ^= exact >> _U64(29)
        if other is not None:
            exact = np.where(number, exact, other)
        raw[0] *= p
        raw[0] += exact
        gridded = scheme.gridded(index)
        if gridded:
            z = (column.number - scheme.means[index]) * (1.0 / scheme.scales[index])
        power, minus = _power(d - 1 - index), _power(d - 1 - index, -1)
        for tier, width in enumerate(scheme.widths, start=1):
            if not gridded:
                raw[tier] *= p
                raw[tier] += exact
                continue
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


def canonical_batch(
    batch: pa.RecordBatch | pa.Table, columns: Sequence[str]
) -> list[CanonicalColumn | None]:
    """Canonical cells of `columns` in an Arrow batch; None for a column it lacks."""
    names = set(batch.schema.names)
    return [canonical_column(batch.column(name)) if name in names else None for name in columns]


def frame_cells(scheme: Scheme, frame: pd.DataFrame) -> list[CanonicalColumn | None]:
    cells: list[CanonicalColumn | None] = []
    for name in scheme.columns:
        if name not in frame.columns:
            cells.append(None)
            continue
        series = frame[name]
        if not hasattr(series, "dtype"):  # a duplicated column name: the first
            series = series.iloc[:, 0]
        cells.append(canonical_column(_arrow_column(series)))
    return cells


def frame_keys(scheme: Scheme, frame: pd.DataFrame, *, probes: bool = True) -> RowKeys:
    """Keys (with probe data) of a pandas frame's rows under `scheme`."""
    cells = frame_cells(scheme, frame)
    if all(c is None for c in cells):
        cells[0] = CanonicalColumn.missing(len(frame))
    return row_keys(scheme, cells, probes=probes)


# --- matching -------------------------------------------------------------------------------


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


# --- building a reference's fingerprints from a stream of batches ----------------------------


@dataclass(frozen=True)
class TierSummary:
    name: str
    distinct: int
    chance_rate: float  # share of sampled reference rows matching another reference row


@dataclass(frozen=True)
class FingerprintSummary:
    scheme: Scheme
    rows: int
    tiers: tuple[TierSummary, ...]
    sample_rows: int

    def chance_rates(self) -> list[float]:
        return [t.chance_rate for t in self.tiers]

    def to_json(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme.to_json(),
            "rows": self.rows,
            "sample_rows": self.sample_rows,
            "tiers": [asdict(t) for t in self.tiers],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FingerprintSummary:
        return cls(
            Scheme.from_json(data["scheme"]),
            int(data["rows"]),
            tuple(
                TierSummary(str(t["name"]), int(t["distinct"]), float(t["chance_rate"]))
                for t in data["tiers"]
            ),
            int(data["sample_rows"]),
        )


class _Spill:
    """Per-tier partition files of keys (by their top bits), each sorted on its own later."""

    def __init__(self, folder: Path, tiers: int) -> None:
        self.folder = folder
        self.parts = 1 << PARTITION_BITS
        self.bounds = np.arange(1, self.parts, dtype=_U64) << _U64(64 - PARTITION_BITS)
        self.pending: list[list[np.ndarray]] = [[] for _ in range(tiers)]
        self.pending_rows = [0] * tiers
        self.files: list[list[IO[bytes]]] = [
            [self._path(t, p).open("wb", buffering=SPILL_BUFFER_BYTES) for p in range(self.parts)]
            for t in range(tiers)
        ]

    def _path(self, tier: int, part: int) -> Path:
        return self.folder / f"t{tier}-p{part}.u64"

    def add(self, tier: int, keys: np.ndarray) -> None:
        self.pending[tier].append(keys)
        self.pending_rows[tier] += len(keys)
        if self.pending_rows[tier] >= SPILL_KEYS:
            self._flush(tier)

    def _flush(self, tier: int) -> None:
        if not self.pending[tier]:
            return
        ordered = np.sort(np.concatenate(self.pending[tier]))
        self.pending[tier].clear()
        self.pending_rows[tier] = 0
        for part, chunk in enumerate(np.split(ordered, np.searchsorted(ordered, self.bounds))):
            if len(chunk):
                self.files[tier][part].write(chunk.tobytes())

    def close(self) -> None:
        for tier, files in enumerate(self.files):
            if not files[0].closed:
                self._flush(tier)
            for fh in files:
                fh.close()

    def partitions(self, tier: int) -> Iterator[np.ndarray]:
        for part in range(self.parts):
            path = self._path(tier, part)
            yield np.fromfile(path, dtype=_U64)
            path.unlink()


class _Reservoir:
    """A uniform sample of CHANCE_SAMPLE_ROWS rows' keys (algorithm R, seeded)."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(SAMPLE_SEED)
        self.seen = 0
        self.slots: RowKeys | None = None

    def add(self, scheme: Scheme, cells: Sequence[CanonicalColumn | None], rows: int) -> None:
        positions = np.arange(self.seen, self.seen + rows)
        self.seen += rows
        take_all = positions < CHANCE_SAMPLE_ROWS
        slot = np.where(take_all, positions, -1)
        later = ~take_all
        if later.any():
            draws = self.rng.integers(0, positions[later] + 1)
            slot[later] = np.where(draws < CHANCE_SAMPLE_ROWS, draws, -1)
        chosen = np.flatnonzero(slot >= 0)
        if not len(chosen):
            return
        keys = row_keys(
            scheme, [c.take(chosen) if c is not None else None for c in cells], probes=True
        )
        targets = slot[chosen]
        first = take_all[chosen]  # the first CHANCE_SAMPLE_ROWS rows fill the slots in order
        if first.any():
            appended = keys.take(np.flatnonzero(first))
            self.slots = appended if self.slots is None else _concat_keys(self.slots, appended)
            keys, targets = keys.take(np.flatnonzero(~first)), targets[~first]
        if self.slots is None or not len(targets):
            return
        # Later rows overwrite earlier ones in the same slot, as algorithm R does in order.
        for column, values in zip(self.slots.raw, keys.raw, strict=True):
            column[targets] = values
        for column, values in zip(self.slots.distance, keys.distance, strict=True):
            column[targets] = values
        for column, values in zip(self.slots.delta, keys.delta, strict=True):
            column[targets] = values


def _concat_keys(a: RowKeys, b: RowKeys) -> RowKeys:
    return RowKeys(
        [np.concatenate([x, y]) for x, y in zip(a.raw, b.raw, strict=True)],
        [np.concatenate([x, y]) for x, y in zip(a.distance, b.distance, strict=True)],
        [np.concatenate([x, y]) for x, y in zip(a.delta, b.delta, strict=True)],
    )


class RetypeColumns(Exception):
    """A batch source must restart: a column's type (guessed from its first rows) was wrong."""


def build_fingerprints(
    open_batches: Callable[[], Iterable[pa.RecordBatch]],
    *,
    columns: Sequence[str],
    target: str,
    classification: bool,
    out: Path,
    tmp_root: Path,
) -> FingerprintSummary:
    """Fingerprint every row of the batches into the file `out` (see the module docstring).

    `open_batches` starts the stream; a stream raising RetypeColumns is started again.
    """
    for _ in range(len(columns) + 2):
        try:
            return _build_once(
                open_batches(),
                columns=columns,
                target=target,
                classification=classification,
                out=out,
                tmp_root=tmp_root,
            )
        except RetypeColumns:
            continue
    raise RuntimeError("the batch source kept changing its column types")


def _build_once(
    batches: Iterable[pa.RecordBatch],
    *,
    columns: Sequence[str],
    target: str,
    classification: bool,
    out: Path,
    tmp_root: Path,
) -> FingerprintSummary:
    iterator = iter(batches)
    head: list[pa.RecordBatch] = []
    seen = 0
    for batch in iterator:
        head.append(batch)
        seen += batch.num_rows
        if seen >= STATS_ROWS:
            break
    head_cells: list[CanonicalColumn | None] = [None] * len(columns)
    if head:
        head_cells = canonical_batch(pa.Table.from_batches(head), columns)
    present = [c if c is not None else CanonicalColumn.missing(seen) for c in head_cells]
    scheme = scheme_from_sample(present, columns, target, classification)
    del head_cells, present
    tiers = len(scheme.tiers)
    tmp_root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="fingerprints-", dir=tmp_root))
    try:
        spill = _Spill(folder, tiers)
        reservoir = _Reservoir()
        rows = 0
        pending: list[tuple[list[CanonicalColumn | None], int]] = []
        pending_rows = 0

        def flush() -> None:
            if not pending_rows:
                return
            cells = _concat_cells(pending, pending_rows)
            pending.clear()
            keys = row_keys(scheme, cells)
            for tier in range(tiers):
                spill.add(tier, keys.keys(tier))
            reservoir.add(scheme, cells, pending_rows)

        try:
            # Small reader blocks keep Arrow's memory low; keys are computed on groups of
            # batches, so the per-call cost of the array operations is paid once per group.
            for batch in _chain(head, iterator):
                if not batch.num_rows:
                    continue
                pending.append((canonical_batch(batch, columns), batch.num_rows))
                pending_rows += batch.num_rows
                rows += batch.num_rows
                if pending_rows >= KEY_GROUP_ROWS:
                    flush()
                    pending_rows = 0
            flush()
        finally:
            spill.close()
        head.clear()
        summary = _write(out, scheme, rows, spill, reservoir.slots)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return summary


def _concat_cells(
    groups: Sequence[tuple[Sequence[CanonicalColumn | None], int]], rows: int
) -> list[CanonicalColumn | None]:
    """Each column's cells over several batches (None only when no batch has the column)."""
    columns: list[CanonicalColumn | None] = []
    for index in range(len(groups[0][0])):
        if all(cells[index] is None for cells, _ in groups):
            columns.append(None)
            continue
        present = [cells[index] or CanonicalColumn.missing(count) for cells, count in groups]
        if len(present) == 1:
            columns.append(present[0])
            continue
        columns.append(
            CanonicalColumn(
                np.concatenate([p.kind for p in present]),
                np.concatenate([p.number for p in present]),
                np.concatenate([p.token for p in present]),
            )
        )
    if all(c is None for c in columns):
        columns[0] = CanonicalColumn.missing(rows)
    return columns


def _write(
    out: Path, scheme: Scheme, rows: int, spill: _Spill, sample: RowKeys | None
) -> FingerprintSummary:
    sample_n = sample.rows if sample is not None else 0
    summaries = []
    offsets = []
    with out.open("wb") as fh:
        for tier, name in enumerate(scheme.tiers):
            own_count = np.zeros(sample_n, dtype=np.int64)
            matched = np.zeros(sample_n, dtype=bool)
            probe_rows, probe_keys = _sample_probes(sample, tier)
            start = fh.tell()
            distinct = 0
            for part in spill.partitions(tier):
                keys, counts = np.unique(part, return_counts=True)
                del part
                fh.write(keys.tobytes())
                distinct += len(keys)
                if sample is not None and len(keys):
                    own = sample.keys(tier)
                    position = np.minimum(np.searchsorted(keys, own), len(keys) - 1)
                    hit = keys[position] == own
                    own_count[hit] += counts[position[hit]]
                    # Probe keys are sorted: only those in this partition's range.
                    lo = int(np.searchsorted(probe_keys, keys[0], side="left"))
                    hi = int(np.searchsorted(probe_keys, keys[-1], side="right"))
                    window = probe_keys[lo:hi]
                    position = np.minimum(np.searchsorted(keys, window), len(keys) - 1)
                    matched[probe_rows[lo:hi][keys[position] == window]] = True
            offsets.append({"offset": start, "count": distinct})
            rate = float(((own_count > 1) | matched).mean()) if sample_n else 0.0
            summaries.append(TierSummary(name, distinct, rate))
        summary = FingerprintSummary(scheme, rows, tuple(summaries), sample_n)
        footer = json.dumps({**summary.to_json(), "arrays": offsets}).encode()
        fh.write(footer)
        fh.write(len(footer).to_bytes(8, "little"))
        fh.write(MAGIC)
    return summary


def _sample_probes(sample: RowKeys | None, tier: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, key) of the sample rows' neighbouring-cell keys, other than their own key."""
    if sample is None or tier == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=_U64)
    probes = sample.probes(tier)
    others = probes != probes[:, :1]  # column 0 is the row's own cell
    rows = np.nonzero(others)[0].astype(np.int32)
    keys = probes[others]
    del probes, others
    order = np.argsort(keys)
    return rows[order], keys[order]


def _chain(first: Iterable[pa.RecordBatch], rest: Iterator[pa.RecordBatch]) -> Iterator[Any]:
    yield from first
    yield from rest


# --- reading a stored fingerprint file -------------------------------------------------------


class FingerprintFormatError(ValueError):
    """The bytes are not a fingerprint file of this scheme version."""


@dataclass
class Fingerprints:
    """An opened fingerprint file: its summary and each tier's sorted keys."""

    summary: FingerprintSummary
    tier_keys: list[np.ndarray]

    @property
    def scheme(self) -> Scheme:
        return self.summary.scheme


def read_footer(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size < 16:
            raise FingerprintFormatError("the file is too short")
        fh.seek(size - 16)
        tail = fh.read(16)
        if tail[8:] != MAGIC:
            raise FingerprintFormatError("not a fingerprint file")
        length = int.from_bytes(tail[:8], "little")
        if not 0 < length <= size - 16:
            raise FingerprintFormatError("bad footer length")
        fh.seek(size - 16 - length)
        meta: dict[str, Any] = json.loads(fh.read(length))
    if int(meta.get("scheme", {}).get("version", -1)) != SCHEME_VERSION:
        raise FingerprintFormatError("another scheme version")
    return meta


@contextlib.contextmanager
def open_fingerprints(path: Path) -> Iterator[Fingerprints]:
    """Memory-map a fingerprint file; its arrays are valid inside the `with` block only."""
    meta = read_footer(path)
    arrays: list[np.ndarray] = []
    for entry in meta["arrays"]:
        count = int(entry["count"])
        if count == 0:
            arrays.append(np.empty(0, dtype=_U64))
        else:
            arrays.append(
                np.memmap(path, dtype=_U64, mode="r", offset=int(entry["offset"]), shape=(count,))
            )
    try:
        yield Fingerprints(FingerprintSummary.from_json(meta), arrays)
    finally:
        arrays.clear()


# --- reading dataset files in batches --------------------------------------------------------

CSV_BLOCK_BYTES = 256 * 1024
CSV_HEAD_BYTES = 1024 * 1024
PARQUET_BATCH_ROWS = 64 * 1024
_CSV_COLUMN = re.compile(r"CSV column #(\d+)")


def file_batches(
    path: Path, file_format: str, columns: Sequence[str]
) -> Callable[[], Iterator[pa.RecordBatch]]:
    """A restartable stream of `columns` (those present) of a dataset file, batch by batch."""
    if file_format == "parquet":
        return lambda: _parquet_batches(path, columns)
    if file_format == "csv":
        return _CsvSource(path, columns)
    return lambda: _whole_file_batches(path, file_format, columns)


def _parquet_batches(path: Path, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    wanted = [c for c in columns if c in parquet.schema_arrow.names]
    yield from parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=wanted)


def _whole_file_batches(
    path: Path, file_format: str, columns: Sequence[str]
) -> Iterator[pa.RecordBatch]:
    from pipeline.checks.quality import read_dataset

    frame = read_dataset(path, file_format)
    wanted = [c for c in columns if c in frame.columns]
    table = pa.Table.from_pandas(frame[wanted], preserve_index=False)
    yield from table.to_batches(max_chunksize=PARQUET_BATCH_ROWS)


class _CsvSource:
    """CSV batches, typed from the first rows: numbers as float64, booleans, text (dictionary).

    Typed parsing is several times faster than parsing text in Python; when a later value
    does not fit its column's type, the column becomes text and the stream restarts.
    """

    TEXT = pa.dictionary(pa.int32(), pa.string())

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        import pyarrow.csv as pacsv

        self.path = path
        self.pacsv = pacsv
        self.parse = pacsv.ParseOptions(newlines_in_values=True)
        with path.open("rb") as fh:
            head = pacsv.open_csv(
                fh,
                read_options=pacsv.ReadOptions(use_threads=False, block_size=CSV_HEAD_BYTES),
                parse_options=self.parse,
                convert_options=pacsv.ConvertOptions(strings_can_be_null=True),
            ).schema
        self.header = list(head.names)
        self.types: dict[str, pa.DataType] = {
            name: self._type(head.field(name).type) for name in columns if name in self.header
        }

    def _type(self, kind: pa.DataType) -> pa.DataType:
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            return pa.float64()
        if pa.types.is_boolean(kind):
            return pa.bool_()
        return self.TEXT

    def __call__(self) -> Iterator[pa.RecordBatch]:
        return self._batches()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        # A Python file object: given a path, Arrow reads ahead tens of MB it need not hold.
        with self.path.open("rb") as fh:
            reader = self.pacsv.open_csv(
                fh,
                read_options=self.pacsv.ReadOptions(use_threads=False, block_size=CSV_BLOCK_BYTES),
                parse_options=self.parse,
                convert_options=self.pacsv.ConvertOptions(
                    include_columns=list(self.types),
                    column_types=dict(self.types),
                    strings_can_be_null=True,
                ),
            )
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except pa.ArrowInvalid as exc:
                    self._retype(exc)
                    raise RetypeColumns from None
                yield batch

    def _retype(self, exc: Exception) -> None:
        found = _CSV_COLUMN.search(str(exc))
        name = self.header[int(found.group(1))] if found else None
        if name in self.types and self.types[name] != self.TEXT:
            self.types[name] = self.TEXT
            return
        if all(kind == self.TEXT for kind in self.types.values()):
            raise exc
        self.types = dict.fromkeys(self.types, self.TEXT)


def fingerprint_file(
    path: Path,
    file_format: str,
    *,
    columns: Sequence[str],
    target: str,
    classification: bool,
    out: Path,
    tmp_root: Path,
) -> FingerprintSummary:
    """Fingerprint a CSV/Parquet file (streamed) into the file `out`."""
    return build_fingerprints(
        file_batches(path, file_format, columns),
        columns=columns,
        target=target,
        classification=classification,
        out=out,
        tmp_root=tmp_root,
    )
