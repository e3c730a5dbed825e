"""The surrogate's bulk values taken in slices of coalitions (a large benchmark's cells do not
fit in memory at once) are the values taken all at once."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards import surrogate
from pipeline.rewards.surrogate import SurrogateGame
from tests.rewards.test_surrogate_values import CASES

COALITIONS = [frozenset(c) for size in (1, 2, 3) for c in itertools.combinations(range(3), size)]


def _values(case: str) -> list[float]:
    frame, task, metric, recipe = CASES[case]
    n = len(frame)
    bench, base, rest = frame.iloc[: n // 3], frame.iloc[n // 3 : n // 2], frame.iloc[n // 2 :]
    parts = [rest.iloc[:20], rest.iloc[20:60], rest.iloc[60:130]]
    scorer = BenchmarkScorer(
        bench, task_type=task, estimator=recipe, target_column="target", metric_name=metric
    )
    higher = metric not in ("rmse", "mae")
    game = SurrogateGame(scorer, base, parts, max_base_rows=10_000, higher_is_better=higher)
    game.prepare(COALITIONS)
    return [game.value(c) for c in COALITIONS]


# Regression coalitions are valued one by one (`SurrogateGame.prepare`): no slices to test.
@pytest.mark.parametrize("case", ["binomial f1", "multinomial accuracy", "multinomial macro f1"])
def test_values_in_slices_of_one_coalition_are_the_values_at_once(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_once = _values(case)
    slices: list[int] = []
    chunk_scores = SurrogateGame._chunk_scores

    def counted(game: SurrogateGame, betas: np.ndarray) -> np.ndarray:
        slices.append(len(betas))
        return chunk_scores(game, betas)

    monkeypatch.setattr(surrogate, "CHUNK_CELLS", 1)
    monkeypatch.setattr(SurrogateGame, "_chunk_scores", counted)
    assert _values(case) == at_once  # the same codes: the same counts
    assert slices == [1] * len(COALITIONS)
