"""Helpers for tests of the owner's training code: model folders and a trainer on real data."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.datasets import load_breast_cancer

from pipeline.sandbox.runner import OwnerTrainer, SubprocessRunner
from pipeline.sandbox.runs import SandboxLimits

# A logistic regression on the numeric columns: what an owner's small train.py looks like.
GOOD_TRAINER = """
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler


def fit(train, target):
    features = train.drop(columns=[target]).select_dtypes("number").columns
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    model.fit(train[features], train[target])

    class Model:
        classes_ = model.classes_

        def predict(self, frame):
            return model.predict(frame[features])

        def predict_proba(self, frame):
            return model.predict_proba(frame[features])

    return Model()
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
