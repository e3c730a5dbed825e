"""The surrogate's bulk values: taken in slices of coalitions (a large benchmark's cells do not
fit in memory at once) they are the values taken all at once, and labels typed apart from the
benchmark's score as on the one-by-one path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards import surrogate_values
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

    monkeypatch.setattr(surrogate_values, "CHUNK_CELLS", 1)
    monkeypatch.setattr(SurrogateGame, "_chunk_scores", counted)
    assert _values(case) == at_once  # the same codes: the same counts
    assert slices == [1] * len(COALITIONS)


def test_labels_typed_apart_from_the_benchmarks_score_as_one_by_one() -> None:
    """Training labels read as text ("0", "1") against a benchmark of integers: the bulk values
    are the values of the one-by-one path, which gives predictions the benchmark's type."""
    frame, task, metric, recipe = CASES["binomial accuracy"]
    n = len(frame)
    bench = frame.iloc[: n // 3].assign(target=lambda f: f["target"].astype("int64"))
    text = frame.iloc[n // 3 :].assign(target=lambda f: f["target"].astype("int64").astype(str))
    base, parts = text.iloc[:60], [text.iloc[60:90], text.iloc[90:150], text.iloc[150:230]]
    scorer = BenchmarkScorer(
        bench, task_type=task, estimator=recipe, target_column="target", metric_name=metric
    )
    bulk = SurrogateGame(scorer, base, parts, max_base_rows=10_000, higher_is_better=True)
    bulk.prepare(COALITIONS)
    one_by_one = SurrogateGame(scorer, base, parts, max_base_rows=10_000, higher_is_better=True)
    values = [bulk.value(c) for c in COALITIONS]
    assert values == pytest.approx([one_by_one.value(c) for c in COALITIONS], abs=1e-9)
    assert any(v != 0.0 for v in values)
