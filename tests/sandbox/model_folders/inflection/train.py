"""A trainer that needs `inflection` (requirements.txt), which the service does not install.

It predicts the most frequent label; the package names the label column, so the fit fails
unless the model's own environment is there. It also checks that the service's packages are
not: the environment holds only what requirements.txt lists and what the harness needs.
"""

import importlib.util

import inflection
import numpy as np


class MostFrequent:
    def __init__(self, label: object) -> None:
        self.label = label

    def predict(self, frame: object) -> np.ndarray:
        return np.full(len(frame), self.label)  # type: ignore[arg-type]


def fit(train, target):  # type: ignore[no-untyped-def]
    if importlib.util.find_spec("sklearn") is not None:
        raise RuntimeError("the service's scikit-learn is visible in the model's environment")
    column = inflection.underscore(inflection.camelize(target))
    return MostFrequent(train[column].mode().iloc[0])
