"""Issue 35, quality order: the same rows with more of their labels flipped never earn more
per row (beyond a small tolerance for the fit's own noise), and rows whose labels are shuffled
earn nothing. Small real data (scikit-learn's breast cancer set), each estimator of the catalog
a supplier meets most: linear, a forest, boosting."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.valuation import BatchValuation, Player, ValuationSettings, value_batch
from tests.support.valuation import CANCER

BENCH, REST = CANCER.iloc[:169], CANCER.iloc[169:].reset_index(drop=True)
# Few accepted rows, so that good rows clearly help. HistGradientBoosting splits a node only
# with 20 rows on each side: on fewer than 40 accepted rows "without" is a constant, and any
# rows, shuffled ones too, would earn by letting it learn the accepted rows' own labels.
BASE_ROWS = {"hist_gradient_boosting_classifier": 50}
ROWS = REST.iloc[50:250].reset_index(drop=True)
SETTINGS = ValuationSettings(resamples=200)
ESTIMATORS = [
    "logistic_regression",
    "random_forest_classifier",
    "hist_gradient_boosting_classifier",
]


def flipped(frame: pd.DataFrame, part: float, seed: int = 3) -> pd.DataFrame:
    """`frame` with `part` of its binary labels flipped (rows drawn with a fixed seed)."""
    out = frame.copy()
    rows = np.random.default_rng(seed).choice(len(out), round(part * len(out)), replace=False)
    out.loc[out.index[rows], "target"] = 1 - out.loc[out.index[rows], "target"]
    return out


def shuffled_labels(frame: pd.DataFrame, seed: int = 4) -> pd.DataFrame:
    out = frame.copy()
    out["target"] = np.random.default_rng(seed).permutation(out["target"].to_numpy())
    return out


def _value(estimator: str, players: list[Player]) -> BatchValuation:
    scorer = BenchmarkScorer(
        BENCH,
        task_type="classification",
        estimator=estimator,
        target_column="target",
        metric_name="roc_auc",
    )
    base = REST.iloc[: BASE_ROWS.get(estimator, 20)]
    return value_batch(scorer, base, players, higher_is_better=True, settings=SETTINGS)


def _paid(found: BatchValuation, key: str) -> float:
    return found.shares[key] if key in found.accepted else 0.0


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_the_same_rows_with_more_labels_flipped_never_earn_more(estimator: str) -> None:
    """Each version of the same 200 rows valued alone against the same accepted rows: its
    value (the pool, paid or not) falls as more labels are flipped, within a tolerance of a
    tenth of the clean rows' value; shuffled labels are never paid."""
    values, paid = {}, {}
    for name, rows in {
        "clean": ROWS,
        "10%": flipped(ROWS, 0.1),
        "30%": flipped(ROWS, 0.3),
        "shuffled": shuffled_labels(ROWS),
    }.items():
        found = _value(estimator, [Player(name, rows)])
        values[name] = found.pool_pct
        paid[name] = _paid(found, name)
    tolerance = 0.1 * abs(values["clean"]) + 0.05
    assert values["10%"] <= values["clean"] + tolerance, values
    assert values["30%"] <= values["10%"] + tolerance, values
    assert values["30%"] < values["clean"], values
    assert paid["shuffled"] == 0.0, (values, paid)
    assert paid["30%"] <= paid["10%"] + tolerance and paid["10%"] <= paid["clean"] + tolerance


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_in_one_batch_noisier_rows_earn_less_per_row_and_shuffled_labels_nothing(
    estimator: str,
) -> None:
    """Four contributions of 50 other rows each in one batch, with 0 %, 10 %, 30 % of their
    labels flipped and their labels shuffled: the paid shares fall with the noise (ties at 0
    allowed) and the shuffled one is rejected."""
    parts = [ROWS.iloc[50 * i : 50 * (i + 1)].reset_index(drop=True) for i in range(4)]
    found = _value(
        estimator,
        [
            Player("clean", parts[0]),
            Player("10%", flipped(parts[1], 0.1)),
            Player("30%", flipped(parts[2], 0.3)),
            Player("shuffled", shuffled_labels(parts[3])),
        ],
    )
    assert "shuffled" not in found.accepted and "shuffled" in found.rejected
    paid = [_paid(found, k) for k in ("clean", "10%", "30%")]
    tolerance = 0.1 * max(paid) + 0.05
    assert paid[1] <= paid[0] + tolerance and paid[2] <= paid[1] + tolerance, found.shares
