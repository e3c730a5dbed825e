"""How many accepted rows the split of a large batch plays on, and which (issue 35).

Within `coalition_row_budget` the model plays every coalition of a batch on all the accepted
rows (`pipeline.rewards.valuation`). Beyond it, up to `exact_max_players` contributions, it
plays them on a sample of the accepted rows as large as the budget allows: every coalition
trains the sample plus its contributions' rows, and all of them together at most the budget's
rows. Only the proportions of that game's Shapley values are used; the pool is still the model
trained on all the accepted rows.

- **Which rows.** Per class, the rows of smallest keyed draw (`stratified_sample`): one accepted
  row fewer changes the sample by that row and the one at the cut, and reordering changes
  nothing.
- **Unweighted.** The owner's code and most estimators take no row weights. So the
  contributions weigh more against the sample than against all the accepted rows; the
  measured splits follow the model's all-row game all the same, within about 3 % of the pool
  from 20,000 sampled rows (`python bench/sample_split.py`).
- **Too small a sample** (under `sample_min_rows`) stands for the accepted data too poorly:
  such a batch, and a batch of more than `exact_max_players`, is split by the surrogate game
  (`pipeline.rewards.surrogate`).

Why not the surrogate for every large batch: for trees and the owner's code it is a linear
stand-in's split, not the model's. For a linear estimator it is the estimator's fit only where
no prediction depends on where the estimator's solver stopped; a benchmark category that a
coalition's rows lack is encoded as zeros, and its prediction then does.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.shapley import Coalition
from pipeline.rewards.surrogate import stratified_sample


def sample_size(coalitions: Sequence[Coalition], player_rows: Sequence[int], budget: int) -> int:
    """The most accepted rows each of `coalitions` can train on beside its contributions'
    rows (`player_rows`, by player), with the budget's rows in all; negative when even the
    contributions' rows are over it."""
    contributed = sum(player_rows[i] for coalition in coalitions for i in coalition)
    return (budget - contributed) // max(len(coalitions), 1)


def keyed_sample(scorer: BenchmarkScorer, base: pd.DataFrame, rows: int) -> pd.DataFrame:
    """`rows` accepted rows, chosen by their content (module docstring)."""
    classification = scorer.task_type == "classification"
    sample, _ = stratified_sample(base, scorer.target_column, rows, classification)
    return sample.reset_index(drop=True)
