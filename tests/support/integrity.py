"""Real-data fixtures for the integrity tests: scikit-learn's bundled tables as models."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pipeline.core.db import Database
from pipeline.models.definitions import ModelDefinition
from pipeline.models.registry import register_model

BENCHMARK_ROWS = 250


def bundled_frame(name: str) -> pd.DataFrame:
    """A bundled scikit-learn table with its `target`, rows shuffled with a fixed seed."""
    from sklearn import datasets

    loader = {
        "breast_cancer": datasets.load_breast_cancer,
        "diabetes": datasets.load_diabetes,
        "wine": datasets.load_wine,
        "digits": datasets.load_digits,
    }[name]
    frame = loader(as_frame=True).frame
    frame.columns = [str(c) for c in frame.columns]
    return frame.sample(frac=1.0, random_state=7).reset_index(drop=True)


def definition_for(name: str, frame: pd.DataFrame) -> ModelDefinition:
    classification = name != "diabetes"
    features = [c for c in frame.columns if c != "target"]
    properties: dict[str, Any] = {c: {"type": "number"} for c in features}
    if classification:
        labels = sorted(int(v) for v in frame["target"].unique())
        properties["target"] = {"type": "integer", "enum": labels}
    else:
        properties["target"] = {"type": "number"}
    return ModelDefinition(
        name=f"sklearn-{name}",
        description=f"scikit-learn's bundled {name} table",
        task_type="classification" if classification else "regression",
        target_column="target",
        estimator="logistic_regression" if classification else "linear_regression",
        data_spec={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": False,
            "required": [*features, "target"],
            "properties": properties,
        },
        example_row=rows_of(frame.iloc[:1])[0],
    )


def register_bundled(db: Database, name: str) -> tuple[int, pd.DataFrame]:
    frame = bundled_frame(name)
    with db.session() as session:
        return register_model(session, definition_for(name, frame)).id, frame


def rows_of(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-like rows: the target as int for classification tables."""
    rows = []
    for record in frame.to_dict(orient="records"):
        row = {k: (float(v) if k != "target" else v) for k, v in record.items()}
        if float(row["target"]).is_integer() and isinstance(record["target"], np.integer):
            row["target"] = int(row["target"])
        rows.append(row)
    return rows


def with_noise(
    frame: pd.DataFrame, scale: float = 1e-4, *, relative: bool = False, seed: int = 3
) -> pd.DataFrame:
    """Small Gaussian noise on every float feature (absolute, or relative to the value)."""
    rng = np.random.default_rng(seed)
    noisy = frame.copy()
    for column in noisy.columns:
        if column == "target" or not pd.api.types.is_float_dtype(noisy[column]):
            continue
        noise = rng.normal(0.0, scale, len(noisy))
        noisy[column] = noisy[column] * (1 + noise) if relative else noisy[column] + noise
    return noisy


def flip_labels(frame: pd.DataFrame, share: float, *, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    flipped = frame.copy()
    rows = rng.choice(len(frame), round(share * len(frame)), replace=False)
    flipped.loc[rows, "target"] = 1 - flipped.loc[rows, "target"]
    return flipped
