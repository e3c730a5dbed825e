"""Keys of training rows taken from their content, so that what is random in a fit depends on
the rows themselves, not on their positions or count.

A row's key is a keyed 64-bit hash of its values (pandas' SipHash with `HASH_KEY`, per column,
mixed with the column's name and added up); equal rows get equal keys. It depends on the row's
own values only: an empty cell adds nothing, and a number is hashed as a float whatever the
column's dtype. So another row in the frame that fills a column the others leave empty, or
turns an integer column into floats, changes no other row's key. From the keys:

- `canonical_order` sorts a training frame by key before a fit, so the order in which the rows
  were stored or submitted changes nothing the estimator or the owner's code sees;
- `keyed_uniform` turns a key and a salt (a tree's seed, a sample's name) into a number in
  [0, 1): a row's draw in a bootstrap or a sample is its own, so leaving one row out changes
  only that row's draws (`pipeline.models.keyed_forest`, `pipeline.rewards.surrogate`).

The key is fixed in the code, so every evaluation is reproducible by anyone holding the rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

HASH_KEY = "rowkeys-v1-35aa7"  # 16 characters: pandas' SipHash key
# How keys are made; a new scheme re-keys every row (training order, a forest's bootstraps, the
# folds), so the valuation cache keys on it (`pipeline.evaluation.without_cache`).
KEY_SCHEME = "row keys 2: own values by column name, empty cells add nothing, numbers as floats"
_U64 = np.uint64
_M1 = _U64(0xFF51AFD7ED558CCD)
_M2 = _U64(0xC4CEB9FE1A85EC53)
_GOLDEN = _U64(0x9E3779B97F4A7C15)


def row_keys(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> np.ndarray:
    """One uint64 per row of `frame` (of `columns`, all by default): a hash of its values
    only, the same wherever the row stands and whatever other rows the frame holds."""
    rows = frame if columns is None else frame[list(columns)]
    keys = np.zeros(len(rows), dtype=np.uint64)
    for position, name in enumerate(rows.columns):
        column = rows.iloc[:, position]
        hashes = pd.util.hash_array(_hashable(column), hash_key=HASH_KEY)
        mixed = _mix(np.asarray(hashes, dtype=np.uint64) ^ _name_salt(name))
        mixed[column.isna().to_numpy()] = 0  # an empty cell adds nothing
        with np.errstate(over="ignore"):
            keys += mixed  # modulo 2**64: the columns' order is moot too
    return keys


def _hashable(column: pd.Series) -> np.ndarray:
    """The column's values as hashed: numbers and booleans as float64 (5 and 5.0 alike, in any
    column dtype), anything else as pandas gives it."""
    if pd.api.types.is_bool_dtype(column) or pd.api.types.is_numeric_dtype(column):
        return np.asarray(column.to_numpy(dtype="float64", na_value=np.nan))
    return np.asarray(column.to_numpy())


def _name_salt(name: object) -> np.uint64:
    """A column's own salt: the same value in two columns adds two different terms."""
    salted = pd.util.hash_array(np.asarray([str(name)], dtype=object), hash_key=HASH_KEY)
    return _U64(salted[0])


def canonical_order(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """`frame`'s rows sorted by `row_keys` (equal rows are equal, so their order is moot)."""
    if len(frame) < 2:
        return frame
    order = np.argsort(row_keys(frame, columns), kind="stable")
    return frame.iloc[order]


def _mix(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser (a new array)."""
    with np.errstate(over="ignore"):
        x = values ^ (values >> _U64(33))
        x = x * _M1
        x ^= x >> _U64(33)
        x = x * _M2
        x ^= x >> _U64(33)
    return np.asarray(x, dtype=np.uint64)


def keyed_uniform(keys: np.ndarray, salt: int) -> np.ndarray:
    """A number in [0, 1) per key, independent across salts and a function of (key, salt)."""
    with np.errstate(over="ignore"):
        salted = _mix(np.asarray([salt & ((1 << 64) - 1)], dtype=np.uint64) * _GOLDEN + _GOLDEN)
        mixed = _mix(np.asarray(keys, dtype=np.uint64) ^ salted[0])
    return (mixed >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))


def poisson_counts(keys: np.ndarray, salt: int, rate: float = 1.0) -> np.ndarray:
    """A Poisson(`rate`) count per key (a bootstrap's draw of each row, as sklearn's
    sampling with replacement is for large frames), from `keyed_uniform`."""
    u = keyed_uniform(keys, salt)
    k = np.arange(64)
    pmf = np.exp(-rate + k * np.log(max(rate, 1e-300)) - np.cumsum(np.log(np.maximum(k, 1))))
    cdf = np.cumsum(pmf)
    counts = np.minimum(np.searchsorted(cdf, u, side="right"), k[-1])
    return np.asarray(counts, dtype=np.float64)
