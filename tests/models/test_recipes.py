"""Model recipes (issue 17 §2): an estimator with parameters, checked at registration, and the
preprocessing in front of it; deterministic fits of the boosted and neighbours estimators.

Parameters are checked against the estimator's own constructor when the model is registered,
so that a recipe never fails at evaluation time; the CLI names the parameter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine
from sqlalchemy import select

from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput
from pipeline.core.tables import Model
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.definitions import model_recipe, parse_definition
from pipeline.models.estimators import Preprocessing, Recipe, build_estimator

HGB = "hist_gradient_boosting_classifier"


def wine_definition(estimator: Any, **extra: Any) -> dict[str, Any]:
    """A model definition for scikit-learn's wine data (three classes)."""
    frame = load_wine(as_frame=True).frame
    properties: dict[str, Any] = {c: {"type": "number"} for c in frame.columns if c != "target"}
    properties["target"] = {"type": "integer", "enum": [0, 1, 2]}
    properties["note"] = {"type": "string"}
    row = {k: (int(v) if k == "target" else float(v)) for k, v in frame.iloc[0].items()}
    return {
        "name": "wine",
        "task_type": "classification",
        "target_column": "target",
        "estimator": estimator,
        "data_spec": {"type": "object", "properties": properties},
        "example_row": row,
        **extra,
    }


def refused(estimator: Any, **extra: Any) -> str:
    with pytest.raises(InvalidInput) as info:
        parse_definition(wine_definition(estimator, **extra))
    return info.value.detail


# --- registration ----------------------------------------------------------------------------


def test_a_recipe_with_parameters_and_a_plain_name_are_both_valid() -> None:
    recipe = parse_definition(
        wine_definition(
            {"name": "lightgbm_classifier", "params": {"n_estimators": 50, "learning_rate": 0.1}},
            preprocessing={"text_columns": ["note"]},
        )
    ).recipe()
    assert recipe == Recipe(
        "lightgbm_classifier",
        {"n_estimators": 50, "learning_rate": 0.1},
        Preprocessing(("note",)),
    )
    assert Recipe.from_json(json.loads(json.dumps(recipe.to_json()))) == recipe
    assert parse_definition(wine_definition("knn_classifier")).recipe() == Recipe("knn_classifier")


@pytest.mark.parametrize(
    ("estimator", "named"),
    [
        # not a parameter of the estimator: the valid ones are listed
        (
            {"name": "hist_gradient_boosting_classifier", "params": {"iterations": 5}},
            "'iterations'",
        ),
        # scikit-learn's own constraints
        (
            {"name": "hist_gradient_boosting_classifier", "params": {"max_iter": "many"}},
            "'max_iter'",
        ),
        ({"name": "knn_classifier", "params": {"weights": "closest"}}, "'weights'"),
        # LightGBM: the constructor default's type, then its own checks in a trial fit
        ({"name": "lightgbm_classifier", "params": {"n_estimators": "many"}}, "'n_estimators'"),
        ({"name": "lightgbm_classifier", "params": {"num_leaves": 1}}, "num_leaves"),
        # seeds and threads are the marketplace's
        ({"name": "lightgbm_classifier", "params": {"n_jobs": 8}}, "'n_jobs' is set by"),
        ({"name": "random_forest_classifier", "params": {"random_state": 3}}, "'random_state'"),
        # an estimator of the other task type, an unknown key
        ({"name": "lightgbm_regressor"}, "is for regression"),
        ({"name": "knn_classifier", "parameters": {}}, "estimator"),
    ],
)
def test_a_bad_parameter_is_refused_at_registration_naming_it(
    estimator: dict[str, Any], named: str
) -> None:
    assert named in refused(estimator)


def test_text_columns_must_be_data_spec_properties_other_than_the_target() -> None:
    assert "'comment'" in refused(
        "logistic_regression", preprocessing={"text_columns": ["comment"]}
    )
    assert "target" in refused("logistic_regression", preprocessing={"text_columns": ["target"]})


def test_the_recipe_is_stored_with_the_model_and_read_back(db: Database) -> None:
    from pipeline.models.registry import register_model

    definition = parse_definition(
        wine_definition({"name": "hist_gradient_boosting_classifier", "params": {"max_iter": 20}})
    )
    with db.session() as session:
        model = register_model(session, definition)
        model_id = model.id
    with db.session() as session:
        stored = session.get(Model, model_id)
        assert stored is not None
        assert stored.estimator == "hist_gradient_boosting_classifier"
        assert model_recipe(stored) == definition.recipe()
        # a model registered before recipes: its estimator's name is its recipe
        demo = session.scalar(select(Model).where(Model.name == "customer-churn"))
        assert demo is not None
        demo.recipe = None
        assert model_recipe(demo) == Recipe("logistic_regression")


def test_cli_models_add_names_a_bad_parameter_and_stores_nothing(
    cli: Any, db: Database, tmp_path: Path
) -> None:
    path = tmp_path / "wine.json"
    bad = {"name": "hist_gradient_boosting_classifier", "params": {"max_iter": -3}}
    path.write_text(json.dumps(wine_definition(bad)))
    status, _, err = cli("models", "add", str(path))
    assert status == 1 and "'max_iter'" in err
    with db.session() as session:
        assert session.scalar(select(Model).where(Model.name == "wine")) is None

    good = {"name": "hist_gradient_boosting_classifier", "params": {"max_iter": 30}}
    path.write_text(json.dumps(wine_definition(good)))
    status, out, _ = cli("models", "add", str(path))
    assert status == 0, out
    status, out, _ = cli("models", "list")
    assert "hist_gradient_boosting_classifier(max_iter=30)" in out


# --- fits -------------------------------------------------------------------------------------


def cancer() -> pd.DataFrame:
    frame: pd.DataFrame = load_breast_cancer(as_frame=True).frame
    return frame.sample(frac=1.0, random_state=0).reset_index(drop=True)


@pytest.mark.parametrize(
    "recipe",
    [
        Recipe("hist_gradient_boosting_classifier", {"max_iter": 40}),
        Recipe("lightgbm_classifier", {"n_estimators": 40}),
        Recipe("knn_classifier", {"n_neighbors": 7}),
    ],
)
def test_the_same_data_gives_the_same_predictions(recipe: Recipe) -> None:
    frame = cancer()
    train, test = frame.iloc[:400], frame.iloc[400:].drop(columns="target")
    fits = [
        build_estimator(recipe, "classification").fit(train.drop(columns="target"), train.target)
        for _ in range(2)
    ]
    first, second = (fit.predict_proba(test) for fit in fits)
    np.testing.assert_array_equal(first, second)
    assert (fits[0].predict(test) == frame.iloc[400:].target).mean() > 0.9


def test_histogram_boosting_does_not_stop_early_unless_the_owner_asks() -> None:
    frame = cancer()
    big = pd.concat([frame] * 19, ignore_index=True)  # 10,811 rows: above the automatic limit
    x, y = big.drop(columns="target"), big.target
    default = build_estimator(
        Recipe("hist_gradient_boosting_classifier", {"max_iter": 15}), "classification"
    )
    assert default.named_steps["model"].early_stopping is False
    assert default.fit(x, y).named_steps["model"].n_iter_ == 15
    chosen = Recipe("hist_gradient_boosting_classifier", {"max_iter": 15, "early_stopping": True})
    assert build_estimator(chosen, "classification").named_steps["model"].early_stopping is True


def test_a_neighbours_model_trains_on_fewer_rows_than_its_k() -> None:
    frame = load_diabetes(as_frame=True).frame
    scorer = BenchmarkScorer(
        frame.iloc[100:],
        task_type="regression",
        estimator=Recipe("knn_regressor", {"n_neighbors": 25}),
        target_column="target",
        metric_name="rmse",
    )
    assert np.isfinite(scorer.score(frame.iloc[:10]))


def test_text_columns_are_read_as_words() -> None:
    """Notes describing a tumour in words (scikit-learn's breast-cancer data), each one different:
    TF-IDF reads the words; as a categorical column (one value per row) they teach nothing."""
    frame = cancer()
    words = []
    for i, row in frame.iterrows():
        size = " ".join(
            f"{name.replace(' ', '-')}-{'high' if row[name] > frame[name].median() else 'low'}"
            for name in ("mean radius", "worst texture", "mean concave points", "worst area")
        )
        words.append(f"patient {i}: {size}")  # free text: every note differs
    notes = pd.DataFrame({"note": words, "target": frame.target})
    train, bench = notes.iloc[:400], notes.iloc[400:]
    options: dict[str, Any] = {
        "task_type": "classification",
        "target_column": "target",
        "metric_name": "accuracy",
    }
    as_text = Recipe("logistic_regression", {}, Preprocessing(("note",)))
    as_category = Recipe("logistic_regression")
    text_score = BenchmarkScorer(bench, estimator=as_text, **options).score(train)
    category_score = BenchmarkScorer(bench, estimator=as_category, **options).score(train)
    assert text_score > 0.85
    assert text_score > category_score + 0.1
