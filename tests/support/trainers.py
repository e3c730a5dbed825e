"""Helpers for tests of the owner's training code: model folders and a trainer on real data."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.datasets import load_breast_cancer

from pipeline.core.db import Database
from pipeline.models.definitions import demo_definition, load_model_folder
from pipeline.models.registry import ModelOwner, register_model_folder
from pipeline.sandbox.runner import OwnerTrainer, SubprocessRunner
from pipeline.sandbox.runs import SandboxLimits
from pipeline.store.objectstore import ObjectStore

# A logistic regression over scaled numbers and one-hot text: what an owner's train.py looks like.
GOOD_TRAINER = """
import pandas as pd
from sklearn.compose import make_column_selector, make_column_transformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler


def _prepared(frame):
    frame = frame.copy()
    for column in frame.columns:
        if pd.api.types.is_bool_dtype(frame[column]) or not pd.api.types.is_numeric_dtype(
            frame[column]
        ):
            frame[column] = frame[column].astype(str)
    return frame


class Model:
    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.classes_ = pipeline.classes_

    def predict(self, frame):
        return self.pipeline.predict(_prepared(frame))

    def predict_proba(self, frame):
        return self.pipeline.predict_proba(_prepared(frame))


def fit(train, target):
    features = _prepared(train.drop(columns=[target]))
    numbers = make_pipeline(SimpleImputer(strategy="median"), StandardScaler())
    text = OneHotEncoder(handle_unknown="ignore")
    pipeline = make_pipeline(
        make_column_transformer(
            (numbers, make_column_selector(dtype_include="number")),
            (text, make_column_selector(dtype_exclude="number")),
        ),
        LogisticRegression(max_iter=1000),
    )
    return Model(pipeline.fit(features, train[target]))
"""

# Fails after printing what it was given: its reason and stderr are for the owner only.
FAILING_TRAINER = """
import sys

def fit(train, target):
    print(f"fitting {len(train)} rows of {sorted(train.columns)}", file=sys.stderr)
    raise ValueError("my secret feature engineering broke")
"""

LIMITS = SandboxLimits(memory_mb=2048, cpu_seconds=60, wall_seconds=90, file_size_mb=64)


def write_folder(root: Path, train_py: str, definition: dict[str, Any] | None = None) -> Path:
    """A model folder: train.py and, when given, model.json."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(textwrap.dedent(train_py))
    if definition is not None:
        (root / "model.json").write_text(json.dumps(definition))
    return root


def cancer_split() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Breast cancer: 400 training rows and a 169-row benchmark, target `target`."""
    frame = load_breast_cancer(as_frame=True).frame
    return frame.iloc[:400].reset_index(drop=True), frame.iloc[400:].reset_index(drop=True)


def run_trainer(
    folder: Path,
    *,
    limits: SandboxLimits = LIMITS,
    probabilities: bool = False,
    isolation: str = "bwrap",
) -> np.ndarray:
    """Fit the folder's train:fit on the training rows in the sandbox; the checked predictions."""
    train, bench = cancer_split()
    trainer = OwnerTrainer(folder, "train:fit", SubprocessRunner(), limits, isolation)
    output = trainer.predict(
        train,
        bench.drop(columns=["target"]),
        target="target",
        task_type="classification",
        probabilities=probabilities,
        y_true=bench["target"].to_numpy(),
    )
    return output.values


def owner_model(db: Database, store: ObjectStore, tmp_path: Path, code: str) -> int:
    """The demo churn model's definition, trained by the owner's `train:fit` instead."""
    definition = demo_definition().model_dump()
    definition.update(name="churn-owner-code", estimator=None, trainer="train:fit")
    folder = load_model_folder(write_folder(tmp_path / "churn-owner", code, definition))
    with db.session() as session:
        model = register_model_folder(session, store, folder, ModelOwner(user_id="owner"))
        return model.id
