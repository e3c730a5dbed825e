"""A binomial surrogate's coalition values skip the benchmark rows whose class the full fit
settles: each coalition's predicted classes are those of its own linear predictor on every row,
however far its coefficients are from the full fit's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.surrogate import SurrogateGame


@pytest.mark.parametrize("spread", [1e-12, 1e-4, 0.05, 0.5, 5.0])
def test_settled_rows_take_the_class_every_coalition_gives_them(spread: float) -> None:
    frame = pd.DataFrame(churn_rows(3000, seed=4))
    bench, base = frame.iloc[:1000], frame.iloc[1000:2000]
    parts = [frame.iloc[start : start + 250] for start in range(2000, 3000, 250)]
    scorer = BenchmarkScorer(
        bench,
        task_type="classification",
        estimator="logistic_regression",
        target_column="churned",
        metric_name="accuracy",
    )
    game = SurrogateGame(scorer, base, parts, max_base_rows=10_000, higher_is_better=True)
    full = game.full_fit[0]
    betas = full + np.random.default_rng(1).normal(0.0, spread, (40, len(full)))
    np.testing.assert_array_equal(game._positive(betas), (game.x_bench @ betas.T) > 0.0)
