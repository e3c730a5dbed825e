"""The preprocessing computed in bulk (for the surrogate game) gives the features of the model's
own scikit-learn preprocessing fitted on the same frame, and leaves what it does not compute
to it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.demo.churn_data import churn_rows
from pipeline.models.bulk_preprocessing import bulk_features
from pipeline.models.preprocessing import MAX_CATEGORIES, build_preprocessor


def _mixed(n: int, seed: int) -> pd.DataFrame:
    """Every kind of column the preprocessing tells apart, with gaps of each NA variant."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "amount": rng.normal(50, 10, n),
            "visits": pd.array(rng.integers(0, 10, n), dtype="Int64"),
            "constant": np.full(n, 0.1),
            "plan": pd.Series(rng.choice(["basic", "plus", "pro"], n), dtype="str"),
            "active": rng.choice([True, False], n),
            "region": pd.Categorical(rng.choice(["north", "south"], n)),
            "mixed": pd.Series(rng.choice(np.array([1, 1.0, "1", True, None, "x"], object), n)),
            "flag": pd.array(rng.choice([True, False], n), dtype="boolean"),
        }
    )
    frame.loc[::7, "amount"] = np.nan
    frame.loc[::9, "visits"] = pd.NA
    frame.loc[::11, "plan"] = None
    frame.loc[::13, "flag"] = pd.NA
    return frame


def _scikit_learn(fitted: pd.DataFrame, others: list[pd.DataFrame]) -> list[np.ndarray]:
    features = build_preprocessor(dense=True)
    first = np.asarray(features.fit_transform(fitted))
    return [first, *(np.asarray(features.transform(o)) for o in others)]


def _bulk(fitted: pd.DataFrame, others: list[pd.DataFrame]) -> list[np.ndarray]:
    bulk = bulk_features(fitted, others)
    assert bulk is not None
    return [bulk.fitted, *bulk.others]


def test_mixed_columns_with_gaps_get_the_pipelines_features() -> None:
    fitted, other = _mixed(300, seed=0), _mixed(80, seed=1)
    other.loc[3, "plan"] = "enterprise"  # a text the fitted frame lacks: no column
    other["amount"] = other["amount"].astype(object)
    other.loc[4, "amount"] = "n/a"  # stray text in a number column: missing, imputed
    for got, expected in zip(_bulk(fitted, [other]), _scikit_learn(fitted, [other]), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_a_missing_category_takes_the_most_frequent_text_ties_to_the_smallest() -> None:
    fitted = pd.DataFrame({"plan": ["pro", "basic", "pro", "basic", None], "x": range(5)})
    other = pd.DataFrame({"plan": [None, "pro"], "x": [1, 2]})
    for got, expected in zip(_bulk(fitted, [other]), _scikit_learn(fitted, [other]), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert _bulk(fitted, [other])[1][0, 1:].tolist() == [1.0, 0.0]  # "basic", not "pro"


def test_the_demo_data_gets_the_pipelines_features_and_its_scaled_columns() -> None:
    fitted = pd.DataFrame(churn_rows(3000, seed=2)).drop(columns="churned")
    other = pd.DataFrame(churn_rows(1000, seed=1)).drop(columns="churned")
    for got, expected in zip(_bulk(fitted, [other]), _scikit_learn(fitted, [other]), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    bulk = bulk_features(fitted, [other])
    assert bulk is not None
    numeric = fitted.select_dtypes(include="number").columns
    assert bulk.scaled.tolist() == [True] * len(numeric) + [False] * (bulk.fitted.shape[1] - 3)


def test_a_column_of_ones_follows_the_features_when_asked() -> None:
    fitted, other = _mixed(120, seed=3), _mixed(40, seed=4)
    plain, with_ones = bulk_features(fitted, [other]), bulk_features(fitted, [other], ones=True)
    assert plain is not None and with_ones is not None
    for got, expected in zip(
        [with_ones.fitted, *with_ones.others], [plain.fitted, *plain.others], strict=True
    ):
        np.testing.assert_array_equal(got, np.hstack([expected, np.ones((len(expected), 1))]))
    assert with_ones.scaled.tolist() == plain.scaled.tolist()


@pytest.mark.parametrize(
    ("frame", "text_columns"),
    [
        (pd.DataFrame({"note": ["a b", "b c"] * 10, "x": range(20)}), ("note",)),
        (pd.DataFrame({"id": [f"t{i}" for i in range(2 * MAX_CATEGORIES)]}), ()),
        (pd.DataFrame({"x": [np.nan] * 20, "y": range(20)}), ()),
        (pd.DataFrame({"x": [1.0, np.inf] * 10, "y": range(20)}), ()),
    ],
    ids=["text column", "categories up to the cap", "a column with no value", "infinity"],
)
def test_what_only_the_pipeline_does_is_left_to_it(
    frame: pd.DataFrame, text_columns: tuple[str, ...]
) -> None:
    assert bulk_features(frame, [frame], text_columns) is None
