"""Valuation of a batch of contributions: significance, bounded improvement and fair shares.

The contributions one run evaluates together (its *batch*) are valued as players of a game
whose value is the improvement their rows bring over the model trained on the accepted data:

    v(S) = improvement_pct(score(accepted + S), score(accepted), floor)      v(∅) = 0

measured in percent against the metric's floor (`pipeline.evaluation.metrics.improvement_floor`),
so a sabotaged or near-zero baseline cannot turn a modest gain into thousands of percent.

- **Shares**: each contribution's share is its Shapley value in that game; the shares add up to
  the pool v(batch). Up to `exact_max_players` players the value is exact (every coalition is
  trained); beyond, it is estimated by KernelSHAP (Lundberg & Lee 2017): a weighted
  least-squares fit over a fixed budget of `shapley_budget` coalitions (at least 2 per
  player), constrained to add up to the pool. The coalition sizes the Shapley kernel weighs
  most (1 and n - 1, then 2 and n - 2, ...) are enumerated whole while the budget allows, the
  rest sampled in complementary pairs with a fixed seed (`kernel_coalitions`). So the cost of
  a large batch grows with the size of its training sets, not with its players' count.
- **Large batches**: when those coalitions would train more than `coalition_row_budget` rows
  in all, the estimator plays them on a keyed sample of the accepted rows that fits the budget
  (`pipeline.rewards.sample_game`); when no sample of `sample_min_rows` fits, or beyond
  `exact_max_players`, the surrogate game of `pipeline.rewards.surrogate` does (no model per
  coalition). Either game's shares are scaled to the pool the estimator measures on all the
  accepted rows; the pool and its interval are always the estimator's. "Without" may be given (the
  cache of `pipeline.evaluation.without_cache`); the models still trained run on the fit
  engine (`pipeline.evaluation.fit_engine`: threads, or a dask cluster).
- **Copies**: contributions with identical rows are one player, trained on once; its value
  is split equally between them, so a copy is neither paid twice nor given a larger part.
- **Order-free**: players are put in a canonical order (a hash of their rows) before anything
  is trained, so the order in which they were submitted changes nothing.
- **Non-positive shares**: a contribution whose share is ≤ 0 does not help the model; it is
  rejected and not trained on, and the others share the pool of the remaining set. With exact
  values the game is played again among them (every coalition is already trained), until
  every share is positive; with sampled values the pool of the rest is shared in proportion
  to the values they were given (one more model, where a replay would cost another budget).
- **Paired fits**: a model of `paired_fits` K > 1 is fitted K times per coalition, each fit
  leaving out one keyed fold (`pipeline.evaluation.scorer`); the game is played on the K fits'
  stacked predictions (the expected game), and `stability` is the pool's band over the K fits'
  own pools (`pipeline.rewards.stability`).
- **Significance**: the pool is paid only when the lower bound of a paired bootstrap
  confidence interval of v(remaining set) over the benchmark rows is above 0; otherwise the
  whole batch is within noise and rejected (`pipeline.rewards.interval`).

Pure computation on DataFrames: `pipeline.rewards.batch_valuation` reads and writes the database
around it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from pipeline.evaluation.fit_engine import FitEngine
from pipeline.evaluation.metrics import (
    Predictions,
    improvement_denominator,
    metric_score,
)
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.interval import Interval, improvement_interval
from pipeline.rewards.players import Player as Player
from pipeline.rewards.players import frame_fingerprints
from pipeline.rewards.sample_game import keyed_sample, sample_size
from pipeline.rewards.shapley import (
    Coalition,
    coalitions_needed,
    exact_shapley,
    kernel_shapley,
    sampling_budget,
)
from pipeline.rewards.shapley import (
    kernel_coalitions as kernel_coalitions,
)
from pipeline.rewards.stability import Stability, copy_pools, pool_stability
from pipeline.rewards.surrogate import SurrogateGame

if TYPE_CHECKING:
    from pipeline.core.config import Settings


# How the shares were computed: Shapley values exact or sampled (KernelSHAP), of the game
# played with the model's estimator (on all the accepted rows, or on a keyed sample of them:
# pipeline.rewards.sample_game) or with the surrogate (pipeline.rewards.surrogate).
EXACT = "exact"
SAMPLED = "kernel_shap"
SAMPLE_EXACT = "sample_exact"
SURROGATE_EXACT = "surrogate_exact"
SURROGATE_SAMPLED = "surrogate_kernel"
# Whether "without" came from the cache (pipeline.evaluation.without_cache) or was trained.
CACHE_HIT = "hit"
CACHE_MISS = "miss"
# Why a player was rejected: its share was not positive, or the batch was within noise.
SHARE_REJECTED = "share"
NOISE = "noise"


@dataclass(frozen=True)
class ValuationSettings:
    resamples: int = 1000
    level: float = 0.95
    exact_max_players: int = 6
    shapley_budget: int = 128
    coalition_row_budget: int = 200_000
    surrogate_max_base_rows: int = 20_000
    sample_min_rows: int = 20_000
    engine: FitEngine = field(default_factory=FitEngine)

    @classmethod
    def from_settings(cls, settings: Settings) -> ValuationSettings:
        return cls(
            resamples=settings.valuation_bootstrap_resamples,
            level=settings.valuation_confidence_level,
            exact_max_players=settings.valuation_exact_max_players,
            shapley_budget=settings.valuation_shapley_budget,
            coalition_row_budget=settings.valuation_coalition_row_budget,
            surrogate_max_base_rows=settings.valuation_surrogate_max_base_rows,
            sample_min_rows=settings.valuation_sample_min_rows,
            engine=FitEngine.from_settings(settings),
        )


@dataclass
class BatchValuation:
    """What a batch's valuation found.

    `shares` holds each player's Shapley value in percent: for accepted players the final
    value (they add up to `pool_pct`), for rejected ones the value that rejected them.
    `score_with` is the score of the model trained on the accepted data plus the accepted
    players (when none is accepted: plus the whole batch), `score_without` on the accepted data.
    """

    metric_name: str
    direction: str
    score_without: float
    score_with: float
    pool_pct: float
    interval: Interval | None
    denominator: float
    method: str
    players: int
    accepted: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # key -> SHARE_REJECTED | NOISE

    shares: dict[str, float] = field(default_factory=dict)
    accepted_rows: int = 0  # distinct rows of the accepted players (a copy counts once)
    coalitions: int = 0  # models trained
    sample_rows: int = 0  # accepted rows the shares' game trained on (all, or a sample)
    without_cache: str = CACHE_MISS
    without: Predictions | None = field(default=None, repr=False, compare=False)
    # The model left behind: its predictions and the players whose rows it added to the
    # accepted data, in training order (one per group of copies).
    with_predictions: Predictions | None = field(default=None, repr=False, compare=False)
    with_keys: tuple[str, ...] = ()
    # The pool's band over the model's paired fits (`pipeline.rewards.stability`); None with
    # one fit, or when no pool was measured.
    stability: Stability | None = None

    @property
    def significant(self) -> bool:
        return self.interval is not None and self.interval.low > 0 and bool(self.accepted)


# --- a batch -----------------------------------------------------------------------------------


class _Game:
    """The game played with the model's estimator: each coalition trained once, its benchmark
    predictions kept. "Without" is given (the cache) or trained with the first coalitions."""

    def __init__(
        self,
        scorer: BenchmarkScorer,
        base: pd.DataFrame | None,
        players: Sequence[Player],
        higher_is_better: bool,
        engine: FitEngine,
        without: Predictions | None,
    ) -> None:
        self.scorer = scorer
        self.players = players
        self.higher_is_better = higher_is_better
        self.engine = engine
        self.base = base if base is not None and len(base) else pd.DataFrame()
        self.results: dict[Coalition, Predictions] = {}
        self.scores: dict[Coalition, float] = {}
        self.trained = 0
        self.without_cached = without is not None
        self.without: Predictions | None = None
        if without is not None:
            self._set_without(without)

    def _set_without(self, without: Predictions) -> None:
        self.without = without
        self.score_without = metric_score(without)
        self.denominator = improvement_denominator(self.score_without, self.scorer.floor)

    def frame(self, coalition: Coalition) -> pd.DataFrame:
        parts = [self.base, *(self.players[i].frame for i in sorted(coalition))]
        return pd.concat([p for p in parts if len(p)], ignore_index=True)

    def improvement(self, score: float) -> float:
        gain = score - self.score_without
        return (gain if self.higher_is_better else -gain) / self.denominator * 100.0

    def prepare(self, coalitions: Sequence[Coalition]) -> None:
        """Train, in parallel on the fit engine, the coalitions not yet trained (and
        "without" when it is not known yet)."""
        missing = [c for c in dict.fromkeys(coalitions) if c and c not in self.results]
        frames = ([self.base] if self.without is None else []) + [self.frame(c) for c in missing]
        if not frames:
            return
        results = self.engine.predict_many(self.scorer, frames)
        if self.without is None:
            self._set_without(results.pop(0))
        self.results.update(zip(missing, results, strict=True))
        self.trained += len(frames)

    def score(self, coalition: Coalition) -> float:
        """The metric of a trained coalition's predictions (computed once)."""
        if coalition not in self.scores:
            self.scores[coalition] = metric_score(self.results[coalition])
        return self.scores[coalition]

    def value(self, coalition: Coalition) -> float:
        if not coalition:
            return 0.0
        if coalition not in self.results:
            self.prepare([coalition])
        return self.improvement(self.score(coalition))

    def within_rows(self, coalitions: Sequence[Coalition], budget: int) -> bool:
        """Whether the estimator's game would fit on at most `budget` training rows over
        `coalitions` (counted until they exceed it)."""
        rows = [p.rows for p in self.players]  # a frame's length is a pandas call: once each
        total, base = 0, len(self.base)
        for coalition in coalitions:
            total += base + sum(rows[i] for i in coalition)
            if total > budget:
                return False
        return True


def value_batch(
    scorer: BenchmarkScorer,
    base: pd.DataFrame | None,
    players: Sequence[Player],
    *,
    higher_is_better: bool,
    settings: ValuationSettings,
    without: Predictions | None = None,
) -> BatchValuation:
    """Value a batch's players against the model trained on `base` (see the module docstring).

    `without` is the benchmark predictions of the model trained on `base` when known (the
    cache of `pipeline.evaluation.without_cache`); otherwise that model is trained here and
    returned in the valuation for the caller to keep.

    Players with identical rows are one player of the game (trained on once), and its value is
    split equally between them: a copy neither doubles the pay nor takes a bigger part of the
    pool from the others.
    """
    units = _units(players)
    game = _Game(
        scorer, base, [unit[0] for unit in units], higher_is_better, settings.engine, without
    )
    method, sample_rows, rounds = _split(game, len(units), settings)
    active, shares, rejected, proportional = rounds
    final = frozenset(active) if active else frozenset(range(len(units)))
    game.prepare([final])
    with_predictions = game.results[final]
    assert game.without is not None  # trained by `prepare` at the latest
    score_with = game.score(final)
    pool = game.improvement(score_with) if active else 0.0
    if proportional:
        given = math.fsum(shares[i] for i in active)
        shares.update({i: shares[i] * pool / given for i in active})
    interval = None
    if active:
        interval = improvement_interval(
            game.without,
            with_predictions,
            higher_is_better=higher_is_better,
            denominator=game.denominator,
            resamples=settings.resamples,
            level=settings.level,
        )
        if not interval.low > 0:
            rejected.update(dict.fromkeys(active, NOISE))
    accepted_units = [i for i in active if i not in rejected]
    stability = None
    if accepted_units and with_predictions.copies > 1:
        pools = copy_pools(game.without, with_predictions, higher_is_better, game.denominator)
        stability = pool_stability(pools, centre=pool)
    return BatchValuation(
        metric_name=scorer.metric.name,
        direction="higher_is_better" if higher_is_better else "lower_is_better",
        score_without=game.score_without,
        score_with=score_with,
        pool_pct=pool,
        interval=interval,
        denominator=game.denominator,
        method=method,
        players=len(players),
        accepted=[p.key for i in accepted_units for p in units[i]],
        rejected={p.key: why for i, why in rejected.items() for p in units[i]},
        shares={p.key: shares[i] / len(units[i]) for i in shares for p in units[i]},
        accepted_rows=sum(units[i][0].rows for i in accepted_units),
        coalitions=game.trained,
        sample_rows=sample_rows,
        without_cache=CACHE_HIT if game.without_cached else CACHE_MISS,
        without=game.without,
        with_predictions=with_predictions,
        with_keys=tuple(units[i][0].key for i in sorted(final)),
        stability=stability,
    )


Rounds = tuple[list[int], dict[int, float], dict[int, str], bool]


def _split(game: _Game, units: int, settings: ValuationSettings) -> tuple[str, int, Rounds]:
    """The shares' game, played in rounds: the method, the accepted rows it trained on, and
    the rounds' result (`_play_rounds`).

    The estimator plays every coalition while their training rows add up to at most
    `coalition_row_budget` (and always for a batch of one, whose share is the pool); beyond,
    on the largest keyed sample of the accepted rows that fits the budget, when it holds at
    least `sample_min_rows`; else the surrogate game of `pipeline.rewards.surrogate` does.
    Those two games give only proportions: their shares are scaled to the pool the estimator
    measures on all the accepted rows.
    """
    exact = units <= settings.exact_max_players
    players = list(range(units))
    needed = coalitions_needed(players, settings.exact_max_players, settings.shapley_budget)
    # The budget counts one fit's rows: an owner's K paired fits multiply the exact split's
    # cost as they multiply every other fit, and a tree's split stays its own model's (the
    # surrogate's split is a linear stand-in's).
    if units == 1 or game.within_rows(needed, settings.coalition_row_budget):
        rounds = _play_rounds(game.value, game.prepare, units, settings, replay=False)
        return (EXACT if exact else SAMPLED), len(game.base), rounds
    # The sample's own "without" is trained too: the empty coalition counts.
    coalitions = [frozenset(), *needed]
    rows = sample_size(coalitions, [p.rows for p in game.players], settings.coalition_row_budget)
    if exact and rows >= settings.sample_min_rows:
        sample = keyed_sample(game.scorer, game.base, rows)
        sampled = _Game(game.scorer, sample, game.players, game.higher_is_better, game.engine, None)
        active, shares, rejected, _ = _play_rounds(
            sampled.value, sampled.prepare, units, settings, replay=False
        )
        game.trained += sampled.trained
        # Its values are on fewer accepted rows: the accepted share the real pool by them.
        return SAMPLE_EXACT, len(sample), (active, shares, rejected, True)
    surrogate = SurrogateGame(
        game.scorer,
        game.base,
        [p.frame for p in game.players],
        max_base_rows=settings.surrogate_max_base_rows,
        higher_is_better=game.higher_is_better,
    )
    # Each round's coalitions are fitted at once; a sampled round costs no model: replayed.
    active, shares, rejected, _ = _play_rounds(
        surrogate.value, surrogate.prepare, units, settings, replay=True
    )
    method = SURROGATE_EXACT if exact else SURROGATE_SAMPLED
    # The surrogate's values are in its own units: the accepted share the real pool by them.
    return method, surrogate.sample_rows, (active, shares, rejected, True)


def _units(players: Sequence[Player]) -> list[list[Player]]:
    """Players grouped by identical rows, in canonical order (by content): the submission
    order changes nothing."""
    if len(players) == 1:
        return [list(players)]  # no copy to find, one order: no fingerprint to compute
    groups: dict[str, list[Player]] = {}
    missing = [p.frame for p in players if not p.fingerprint]
    computed = iter(frame_fingerprints(missing))
    for player in players:
        fingerprint = player.fingerprint or next(computed)
        groups.setdefault(fingerprint, []).append(Player(player.key, player.frame, fingerprint))
    return [sorted(groups[f], key=lambda p: p.key) for f in sorted(groups)]


def _play_rounds(
    value: Callable[[Coalition], float],
    prepare: Callable[[Sequence[Coalition]], None],
    units: int,
    settings: ValuationSettings,
    *,
    replay: bool,
) -> Rounds:
    """Shapley rounds: units with a share not above 0 are rejected and the rest play again.

    `prepare` trains (or fits) a round's coalitions at once. With `replay` (the surrogate,
    whose coalitions cost no training) every round is replayed, sampled or not; without it a
    sampled round is not.
    Returns the units left, every unit's last share, the rejected units with why, and whether
    the shares left must be scaled to their own pool (a sampled round is not replayed).
    """
    active = list(range(units))
    rejected: dict[int, str] = {}
    shares: dict[int, float] = {}
    while active:
        prepare(coalitions_needed(active, settings.exact_max_players, settings.shapley_budget))
        exact = len(active) <= settings.exact_max_players
        if exact:
            round_shares = exact_shapley(active, value)
        else:
            budget = sampling_budget(len(active), settings.shapley_budget)
            round_shares = kernel_shapley(active, value, budget)
        shares.update(round_shares)
        losing = [i for i in active if round_shares[i] <= 0]
        rejected.update(dict.fromkeys(losing, SHARE_REJECTED))
        if not losing:
            break
        active = [i for i in active if round_shares[i] > 0]
        if not exact and not replay:
            # Replaying a sampled game would cost another budget of models: the rest share
            # their own pool in proportion to the values they were just given.
            return active, shares, rejected, True
    return active, shares, rejected, False
