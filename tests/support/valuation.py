"""Models over scikit-learn's bundled real datasets, for the valuation and payout tests."""

from __future__ import annotations

from typing import Any

import pandas as pd
from sklearn.datasets import load_breast_cancer, load_diabetes

from pipeline.core.db import Database
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.definitions import ModelDefinition
from pipeline.models.registry import register_model


def shuffled(frame: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    return frame.sample(frac=1, random_state=seed).reset_index(drop=True)


CANCER = shuffled(load_breast_cancer(as_frame=True).frame)
DIABETES = load_diabetes(as_frame=True).frame


def register_frame_model(
    db: Database, name: str, frame: pd.DataFrame, *, task_type: str, estimator: str
) -> int:
    """A model whose data-spec accepts `frame`'s rows: numeric features, its `target`."""
    target: dict[str, Any] = (
        {"type": "integer", "enum": sorted(int(v) for v in frame.target.unique())}
        if task_type == "classification"
        else {"type": "number"}
    )
    properties = {c: {"type": "number"} for c in frame.columns if c != "target"}
    properties["target"] = target
    definition = ModelDefinition(
        name=name,
        task_type=task_type,  # type: ignore[arg-type]
        target_column="target",
        estimator=estimator,
        data_spec={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": False,
            "required": list(properties),
            "properties": properties,
        },
        example_row=rows(frame.iloc[:1])[0],
    )
    with db.session() as session:
        return register_model(session, definition).id


def rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows: plain floats, integer targets for classification."""
    records = frame.to_dict("records")
    integral = pd.api.types.is_integer_dtype(frame["target"])
    return [
        {k: (int(v) if k == "target" and integral else float(v)) for k, v in r.items()}
        for r in records
    ]


def churn_scorer(bench: pd.DataFrame) -> BenchmarkScorer:
    """Logistic regression scored by accuracy on demo churn benchmark rows."""
    return BenchmarkScorer(
        bench,
        task_type="classification",
        estimator="logistic_regression",
        target_column="churned",
        metric_name="accuracy",
    )
