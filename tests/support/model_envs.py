"""Model folders with requirements.txt for the environment tests; their evaluation in the box."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.trainers import StepTrainers
from pipeline.models.definitions import demo_definition
from pipeline.store.objectstore import LocalObjectStore

# Needs `mk_greeting` (a wheel tests write: tests/support/wheels.py) and must not see the
# service's scikit-learn.
TRAIN_PY = """
import importlib.util

import mk_greeting
import numpy as np


class MostFrequent:
    def __init__(self, label):
        self.label = label

    def predict(self, frame):
        return np.full(len(frame), self.label)


def fit(train, target):
    assert importlib.util.find_spec("sklearn") is None, "the service's packages are visible"
    return MostFrequent(train[mk_greeting.column(target)].mode().iloc[0])
"""


def model_folder(root: Path, name: str, requirements: str | None) -> Path:
    definition = demo_definition().model_dump()
    definition.update(name=name, estimator=None, trainer="train:fit")
    root.mkdir(parents=True)
    (root / "model.json").write_text(json.dumps(definition))
    (root / "train.py").write_text(TRAIN_PY)
    if requirements is not None:
        (root / "requirements.txt").write_text(requirements)
    return root


def envs(settings: Settings) -> list[str]:
    root = settings.envs_dir
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def predict(settings: Settings, db: Database, model_id: int) -> np.ndarray:
    from pipeline.services import Services

    services = Services(settings, db=db, store=LocalObjectStore(settings.objects_dir))
    trainers = StepTrainers(services)
    try:
        trainer = trainers.for_model(model_id)
        assert trainer is not None
        train = pd.DataFrame(churn_rows(300, seed=3))
        bench = pd.DataFrame(churn_rows(50, seed=4))
        output = trainer.predict(
            train,
            bench.drop(columns=["churned"]),
            target="churned",
            task_type="classification",
            probabilities=False,
            y_true=bench["churned"].to_numpy(),
        )
        return output.values
    finally:
        trainers.close()
