"""The paired bootstrap interval of an improvement between two models' benchmark predictions.

Each resample draws the benchmark rows with replacement (the same rows for both models, hence
paired) and recomputes both metrics on it from the per-row predictions, vectorised over blocks
of resamples; no model is refitted. Used by `pipeline.rewards.valuation` for a batch's pool.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from pipeline.evaluation.metrics import Predictions, benchmark_rows, metric_samples

# Fixed, so the same data always gets the same interval and the same shares.
BOOTSTRAP_SEED = 20_231_123
# Bootstrap weights are drawn in blocks of about this many cells (resamples x rows).
_BLOCK_CELLS = 2_000_000
# Rows are drawn by cell when there are at least this many rows per cell (a binomial draw of
# the multinomial costs about as much as four integer draws).
_CELL_GAIN = 4


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap interval of an improvement, in percent."""

    low: float
    high: float
    level: float
    resamples: int
    # The resamples' standard deviation: the standard error the try budget's bounds use.
    se: float = math.nan

    def describe(self) -> str:
        return f"{self.level:.0%} interval [{self.low:+.2f}, {self.high:+.2f}] %"

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def improvement_interval(
    without: Predictions,
    with_: Predictions,
    *,
    higher_is_better: bool,
    denominator: float,
    resamples: int,
    level: float,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """Paired percentile bootstrap of the improvement from `without` to `with_`, in percent.

    Each resample draws the benchmark rows with replacement (the same rows for both models,
    hence paired) and recomputes both metrics on it, vectorised over a block of resamples.
    A metric only sees a row through its (target, prediction with, prediction without): rows
    alike in all three are one cell, and a resample's count per cell is drawn at once from the
    multinomial law the row-by-row draws add up to (the same bootstrap distribution, a few
    draws per resample instead of one per row: labels give at most classes³ cells).

    Paired fits (`copies` K > 1: K blocks of the benchmark rows, one per fit): a drawn row
    counts in every block, so the resample is of benchmark rows, never of K·n independent
    ones (which would narrow the interval by about √K). A cell is then a row's target and
    its K predictions with and without.
    """
    if with_.copies != without.copies:
        raise ValueError(
            f"paired bootstrap of {with_.copies} paired fits with against "
            f"{without.copies} without: the two sides must come from the same fits"
        )
    copies = without.copies
    rows = benchmark_rows(without)
    if benchmark_rows(with_) != rows:
        raise ValueError("paired bootstrap of predictions on different benchmark rows")
    cells = _cells(without, with_)
    rng = np.random.default_rng(seed)
    width = rows if cells is None else len(cells[2])
    block = max(1, min(resamples, _BLOCK_CELLS // max(width * copies, 1)))
    sign = 1.0 if higher_is_better else -1.0
    gains: list[np.ndarray] = []
    done = 0
    while done < resamples:
        size = min(block, resamples - done)
        if cells is None:
            counts, pair = _row_counts(rng, rows, size), (with_, without)
        else:
            counts, pair = rng.multinomial(rows, cells[2] / rows, size=size), cells[:2]
        if copies > 1:
            counts = np.tile(counts, (1, copies))  # each drawn row, in every fit's block
        gains.append(sign * (metric_samples(pair[0], counts) - metric_samples(pair[1], counts)))
        done += size
    values = np.concatenate(gains) / denominator * 100.0
    values = values[np.isfinite(values)]
    if not len(values):
        return Interval(math.nan, math.nan, level, 0)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return Interval(float(low), float(high), level, len(values), float(np.std(values)))


def _row_counts(rng: np.random.Generator, rows: int, size: int) -> np.ndarray:
    """`size` resamples of `rows` rows drawn with replacement: each row's count per resample."""
    draws = rng.integers(0, rows, size=(size, rows))
    offsets = (np.arange(size) * rows)[:, None]
    return np.bincount((draws + offsets).ravel(), minlength=size * rows).reshape(size, rows)


def _cells(
    without: Predictions, with_: Predictions
) -> tuple[Predictions, Predictions, np.ndarray] | None:
    """The benchmark's distinct (target, with, without) rows as two Predictions and each
    one's row count; None when outputs are per-class scores or the rows barely repeat (the
    row-by-row draws are then cheaper than a multinomial over as many cells). With copies, a
    cell is alike in the target and every copy's with and without (each kept `copies` times)."""
    if without.outputs.ndim != 1 or with_.outputs.ndim != 1 or not len(without.y_true):
        return None
    copies = without.copies
    rows = benchmark_rows(without)
    blocks = [slice(k * rows, (k + 1) * rows) for k in range(copies)]
    columns = [
        without.y_true[:rows],
        *(with_.outputs[b] for b in blocks),
        *(without.outputs[b] for b in blocks),
    ]
    factors = [pd.factorize(c) for c in columns]
    if math.prod(len(uniques) + 1 for _, uniques in factors) >= 2**62:
        return None  # the cell keys would not fit in int64 (and the rows barely repeat)
    key = np.zeros(rows, dtype="int64")
    for codes, uniques in factors:
        key = key * (len(uniques) + 1) + (codes + 1)  # NaN (code -1) is a value of its own
    keys = math.prod(len(uniques) + 1 for _, uniques in factors)
    if keys <= 4 * len(key):
        # Few possible keys (labels): counted without a sort, in the order of the keys as
        # `np.unique` gives them; any row of a cell stands for it (they are alike).
        every = np.bincount(key, minlength=keys)
        present = np.flatnonzero(every)
        first = np.empty(keys, dtype=np.intp)
        first[key] = np.arange(len(key))
        first, counts = first[present], every[present]
    else:
        _, first, counts = np.unique(key, return_index=True, return_counts=True)
    if len(first) * _CELL_GAIN > len(key):
        return None
    if copies > 1:
        first = (first[None, :] + rows * np.arange(copies)[:, None]).ravel()
    return (
        replace(with_, y_true=with_.y_true[first], outputs=with_.outputs[first]),
        replace(without, y_true=without.y_true[first], outputs=without.outputs[first]),
        counts.astype("float64"),
    )
