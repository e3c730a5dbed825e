"""Information-free contributions on real data, and a domain-level world to try them in.

Used by tests/rewards/test_try_budget.py and by `python bench/lottery.py`. Three kinds of rows
carry no information the model does not already have:

- `jittered`: a resample of accepted rows with small Gaussian noise on the float features;
- `subset`: a random subset of accepted rows;
- `drawn`: rows drawn from the training distribution (a Gaussian fitted to the accepted
  features, per class for classification), labelled by the model trained on the accepted rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pipeline.models.estimators import build_estimator

KINDS = ("jittered", "subset", "drawn")


def float_columns(frame: pd.DataFrame, target: str) -> list[str]:
    return [c for c in frame.columns if c != target and pd.api.types.is_float_dtype(frame[c].dtype)]


def numeric_features(frame: pd.DataFrame, target: str) -> list[str]:
    return [
        c
        for c in frame.columns
        if c != target
        and pd.api.types.is_numeric_dtype(frame[c].dtype)
        and not pd.api.types.is_bool_dtype(frame[c].dtype)
    ]


def jittered(
    accepted: pd.DataFrame, target: str, rng: np.random.Generator, rows: int, scale: float = 0.02
) -> pd.DataFrame:
    """Accepted rows resampled, float features moved by `scale` standard deviations."""
    picked = accepted.iloc[rng.choice(len(accepted), size=rows, replace=rows > len(accepted))]
    frame = picked.reset_index(drop=True).copy()
    for column in float_columns(frame, target):
        std = float(accepted[column].std()) or 1.0
        frame[column] = (frame[column] + rng.normal(0.0, scale * std, len(frame))).round(6)
    return frame


def subset(
    accepted: pd.DataFrame, target: str, rng: np.random.Generator, rows: int
) -> pd.DataFrame:
    """A random subset of the accepted rows (without replacement)."""
    picked = rng.choice(len(accepted), size=min(rows, len(accepted)), replace=False)
    return accepted.iloc[np.sort(picked)].reset_index(drop=True).copy()


def drawn(
    accepted: pd.DataFrame,
    target: str,
    rng: np.random.Generator,
    rows: int,
    *,
    task_type: str,
    estimator: str,
) -> pd.DataFrame:
    """Rows drawn from a Gaussian fitted to the accepted features, labelled by the model the
    accepted rows train: nothing in them is new to the model."""
    features = numeric_features(accepted, target)
    groups = (
        [g for _, g in accepted.groupby(target)] if task_type == "classification" else [accepted]
    )
    parts = []
    for group in groups:
        count = max(1, round(rows * len(group) / len(accepted)))
        values = group[features].to_numpy(dtype=float)
        mean = values.mean(axis=0)
        cov = np.cov(values, rowvar=False) + 1e-9 * np.eye(len(features))
        parts.append(rng.multivariate_normal(mean, cov, size=count))
    frame = pd.DataFrame(np.vstack(parts)[:rows], columns=features)
    for column in features:
        low, high = accepted[column].min(), accepted[column].max()
        if pd.api.types.is_integer_dtype(accepted[column].dtype):
            frame[column] = frame[column].round().clip(low, high).astype(int)
        else:
            frame[column] = frame[column].clip(low, high).round(6)
    for column in accepted.columns:
        if column not in features and column != target:
            frame[column] = (
                accepted[column].iloc[rng.integers(0, len(accepted), len(frame))].to_numpy()
            )
    inputs = [c for c in accepted.columns if c != target]
    model = build_estimator(estimator, task_type)
    model.fit(accepted[inputs], accepted[target])
    frame[target] = model.predict(frame[inputs])
    if task_type == "classification":
        frame[target] = frame[target].astype(accepted[target].dtype)
    return frame[list(accepted.columns)]


def information_free(
    kind: str,
    accepted: pd.DataFrame,
    target: str,
    rng: np.random.Generator,
    rows: int,
    **model: Any,
) -> pd.DataFrame:
    if kind == "jittered":
        return jittered(accepted, target, rng, rows)
    if kind == "subset":
        return subset(accepted, target, rng, rows)
    return drawn(accepted, target, rng, rows, **model)
