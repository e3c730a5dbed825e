"""Baseline estimators: names by task type, mixed-type preprocessing, fixed seeds."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import InvalidInput
from pipeline.models.estimators import (
    ESTIMATORS,
    RANDOM_STATE,
    build_estimator,
    validate_estimator,
)

CLASSIFIERS = [n for n, tasks in ESTIMATORS.items() if "classification" in tasks]
REGRESSORS = [n for n, tasks in ESTIMATORS.items() if "regression" in tasks]


def _mixed_frame(n: int = 120, seed: int = 0) -> pd.DataFrame:
    """Numeric, nullable-integer, text, boolean and categorical columns, with gaps."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "amount": rng.normal(50, 10, n),
            "visits": pd.array(rng.integers(0, 10, n), dtype="Int64"),
            "plan": rng.choice(["basic", "plus", "pro"], n),
            "active": rng.choice([True, False], n),
            "region": pd.Categorical(rng.choice(["north", "south"], n)),
        }
    )
    frame.loc[::7, "amount"] = np.nan
    frame.loc[::9, "visits"] = pd.NA
    frame.loc[::11, "plan"] = None
    return frame


def test_estimator_names_by_task_type() -> None:
    assert set(CLASSIFIERS) == {
        "logistic_regression",
        "random_forest_classifier",
        "gradient_boosting_classifier",
        "hist_gradient_boosting_classifier",
        "lightgbm_classifier",
        "knn_classifier",
    }
    assert set(REGRESSORS) == {
        "linear_regression",
        "ridge",
        "random_forest_regressor",
        "hist_gradient_boosting_regressor",
        "lightgbm_regressor",
        "knn_regressor",
    }


def test_importing_the_module_does_not_import_sklearn() -> None:
    code = "import sys, pipeline.models.estimators; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_unknown_estimator_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="unknown estimator 'xgboost'"):
        validate_estimator("xgboost", "classification")


def test_estimator_for_the_other_task_type_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="is for regression, not classification"):
        validate_estimator("ridge", "classification")
    with pytest.raises(InvalidInput, match="is for classification"):
        build_estimator("logistic_regression", "regression")


def test_unknown_task_type_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="unknown task_type"):
        validate_estimator("ridge", "clustering")


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_estimator_fits_mixed_columns_and_predicts_unseen_categories(name: str) -> None:
    train = _mixed_frame()
    task = ESTIMATORS[name][0]
    y = (
        (train["amount"].fillna(50) > 50).astype(int)
        if task == "classification"
        else (train["amount"].fillna(50) * 2)
    )
    pipeline = build_estimator(name, task)
    pipeline.fit(train, y.to_numpy())

    bench = _mixed_frame(40, seed=1)
    bench.loc[0, "plan"] = "enterprise"  # never seen in training
    bench["amount"] = bench["amount"].astype(object)  # dtype differs from the training frame
    predictions = pipeline.predict(bench)
    assert len(predictions) == 40


def test_columns_are_split_by_training_dtypes() -> None:
    pipeline = build_estimator("logistic_regression", "classification")
    train = _mixed_frame()
    pipeline.fit(train, np.arange(len(train)) % 2)
    columns = {name: list(cols) for name, _, cols in pipeline.named_steps["features"].transformers_}
    assert columns["numeric"] == ["amount", "visits"]
    assert columns["categorical"] == ["plan", "active", "region"]


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_seeded_estimator_uses_random_state_zero(name: str) -> None:
    model = build_estimator(name, ESTIMATORS[name][0]).named_steps["model"]
    if "random_state" in model.get_params():
        assert model.get_params()["random_state"] == RANDOM_STATE == 0


def test_same_data_gives_the_same_model() -> None:
    train = _mixed_frame()
    y = (train["amount"].fillna(50) > 50).astype(int).to_numpy()
    first = build_estimator("random_forest_classifier", "classification").fit(train, y)
    second = build_estimator("random_forest_classifier", "classification").fit(train, y)
    bench = _mixed_frame(40, seed=2)
    np.testing.assert_array_equal(first.predict_proba(bench), second.predict_proba(bench))


def test_categories_are_the_values_as_text_with_mixed_types_kept_apart() -> None:
    """One category per distinct text: in a column of mixed values 1.0 and True stay apart from
    1 (they are equal to Python; 1 and "1" are one text), every NA variant is missing (imputed),
    and a typed text column gets its own values."""
    mixed = pd.Series([1, 1.0, "1", True, None, np.nan, pd.NA, "1"], dtype=object)
    typed = pd.Series(["b", "a", None, "b", "b", "a", None, "a"], dtype="str")
    train = pd.DataFrame({"mixed": mixed, "typed": typed, "flag": [True, False] * 4})
    pipeline = build_estimator("logistic_regression", "classification")
    pipeline.fit(train, np.arange(len(train)) % 2)
    encoder = pipeline.named_steps["features"].named_transformers_["categorical"]["encode"]
    assert [list(c) for c in encoder.categories_] == [
        ["1", "1.0", "True"],
        ["a", "b"],
        ["False", "True"],
    ]
    encoded = pipeline.named_steps["features"].transform(train)
    # The missing cells of "mixed" take its most frequent text, "1" (3 of 5 known cells).
    assert [row[-7:-4].tolist() for row in np.asarray(encoded)[4:7]] == [[1.0, 0.0, 0.0]] * 3


def test_one_hot_columns_are_capped_for_id_like_text_only() -> None:
    """An ID-like text column is cut to MAX_CATEGORIES one-hot columns (the rarest sharing one);
    a column with fewer distinct values keeps one column each, even beside it."""
    from pipeline.models.preprocessing import MAX_CATEGORIES

    n = 400
    train = pd.DataFrame(
        {
            "ticket": [f"t{i % 200}" for i in range(n)],
            "plan": ["basic", "plus", "pro", "basic"] * (n // 4),
            "seat": [f"s{i % (MAX_CATEGORIES - 1)}" for i in range(n)],
        }
    )
    pipeline = build_estimator("logistic_regression", "classification")
    pipeline.fit(train, np.arange(n) % 2)
    encoder = pipeline.named_steps["features"].named_transformers_["categorical"]["encode"]
    rare = [0 if i is None else len(i) for i in encoder.infrequent_categories_]
    assert [len(c) for c in encoder.categories_] == [200, 3, MAX_CATEGORIES - 1]
    assert rare == [200 - MAX_CATEGORIES + 1, 0, 0]  # 49 kept, 151 share one column
    assert pipeline.named_steps["features"].transform(train).shape[1] == 2 * MAX_CATEGORIES + 2
