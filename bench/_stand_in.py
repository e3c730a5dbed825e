"""Shared by bench/_faithfulness.py and bench/_expected_game.py: the valuation's linear
stand-in, played for any estimator, and `playing`, which puts a game in the valuation's place.

The valuation plays the estimator's own objective for a linear estimator and the stand-in for
the others. The bench measures the stand-in's split of a tree estimator's pool against exact
Shapley, so it needs the stand-in by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from pipeline.rewards import valuation
from pipeline.rewards.surrogate import SurrogateGame
from pipeline.rewards.surrogate_objective import STAND_IN_PENALTY, Objective


class StandInGame(SurrogateGame):
    """The linear stand-in (penalty `STAND_IN_PENALTY` on the model's own preprocessing),
    whatever the valuation plays for the estimator."""

    def _objective(self) -> Objective:
        return Objective(STAND_IN_PENALTY, False)


@contextmanager
def playing(game: type[Any]) -> Iterator[None]:
    """`value_batch` splits large batches with `game` (a class built as `SurrogateGame` is)
    instead of the valuation's own surrogate (for the bench only: the valuation has no such
    setting)."""
    with mock.patch.object(valuation, "SurrogateGame", game):
        yield
