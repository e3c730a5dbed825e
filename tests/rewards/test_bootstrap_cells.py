"""The bootstrap interval drawn per cell of alike benchmark rows is the row-by-row bootstrap.

`improvement_interval` draws a resample's counts per distinct (target, with, without) row from
their multinomial law when rows repeat (predicted labels, rounded values). The interval must be
the one the row-by-row draws give, up to Monte Carlo noise: same seed, same data, both ways.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pipeline.evaluation.metrics import Predictions
from pipeline.rewards import interval
from pipeline.rewards.interval import improvement_interval

ROWS = 4000


def _labels(metric: str, classes: int) -> tuple[Predictions, Predictions]:
    rng = np.random.default_rng(5)
    y = rng.integers(0, classes, ROWS)
    without = np.where(rng.random(ROWS) < 0.70, y, rng.integers(0, classes, ROWS))
    with_ = np.where(rng.random(ROWS) < 0.78, y, rng.integers(0, classes, ROWS))
    labels = tuple(range(classes))
    return Predictions(metric, y, without, labels), Predictions(metric, y, with_, labels)


def _rounded(metric: str) -> tuple[Predictions, Predictions]:
    rng = np.random.default_rng(6)
    y = rng.integers(0, 10, ROWS).astype("float64")
    without = np.round(y + rng.normal(0, 2.0, ROWS)).clip(0, 9)
    with_ = np.round(y + rng.normal(0, 1.6, ROWS)).clip(0, 9)
    return Predictions(metric, y, without), Predictions(metric, y, with_)


@pytest.mark.parametrize(
    ("pair", "higher_is_better"),
    [
        (_labels("accuracy", 2), True),
        (_labels("f1", 2), True),
        (_labels("f1", 3), True),
        (_rounded("rmse"), False),
        (_rounded("r2"), True),
    ],
    ids=["accuracy", "f1 binary", "f1 macro", "rmse", "r2"],
)
def test_the_interval_by_cells_is_the_row_by_row_interval(
    monkeypatch: pytest.MonkeyPatch, pair: tuple[Predictions, Predictions], higher_is_better: bool
) -> None:
    options: dict[str, Any] = {
        "higher_is_better": higher_is_better,
        "denominator": 0.5,
        "resamples": 2000,
        "level": 0.95,
    }
    assert interval._cells(*pair) is not None  # these rows repeat: drawn by cell
    by_cells = improvement_interval(*pair, **options)
    assert by_cells == improvement_interval(*pair, **options)  # seeded
    monkeypatch.setattr(interval, "_CELL_GAIN", ROWS + 1)  # every row drawn on its own
    assert interval._cells(*pair) is None
    by_rows = improvement_interval(*pair, **options)
    assert by_cells.resamples == by_rows.resamples == 2000
    # Monte Carlo noise of a 2.5 % quantile of 2,000 resamples is about 0.06 standard errors.
    assert by_cells.se == pytest.approx(by_rows.se, rel=0.08)
    assert by_cells.low == pytest.approx(by_rows.low, abs=0.35 * by_rows.se)
    assert by_cells.high == pytest.approx(by_rows.high, abs=0.35 * by_rows.se)
    assert by_cells.low < by_cells.high


def test_rows_that_barely_repeat_are_drawn_one_by_one() -> None:
    rng = np.random.default_rng(7)
    y = rng.normal(size=ROWS)
    pair = (Predictions("mae", y, y + rng.normal(size=ROWS)), Predictions("mae", y, y * 0.9))
    assert interval._cells(*pair) is None
    scores = rng.random((ROWS, 2))
    labels = rng.integers(0, 2, ROWS)
    auc = (Predictions("roc_auc", labels, scores, (0, 1)),) * 2
    assert interval._cells(*auc) is None  # per-class scores: one cell per row
