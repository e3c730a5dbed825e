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
- **Copies**: contributions with identical rows are one player, trained on once; its value
  is split equally between them, so a copy is neither paid twice nor given a larger part.
- **Order-free**: players are put in a canonical order (a hash of their rows) before anything
  is trained, so the order in which they were submitted changes nothing.
- **Non-positive shares**: a contribution whose share is ≤ 0 does not help the model; it is
  rejected and not trained on, and the others share the pool of the remaining set. With exact
  values the game is played again among them (every coalition is already trained), until
  every share is positive; with sampled values the pool of the rest is shared in proportion
  to the values they were given (one more model, where a replay would cost another budget).
- **Significance**: the pool is paid only when the lower bound of a paired bootstrap
  confidence interval of v(remaining set) over the benchmark rows is above 0; otherwise the
  whole batch is within noise and rejected.

Pure computation on DataFrames: `pipeline.evaluation.batch_valuation` reads and writes the database
around it.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pipeline.evaluation.metrics import (
    Predictions,
    improvement_denominator,
    metric_samples,
    metric_score,
)
from pipeline.evaluation.scorer import BenchmarkScorer

if TYPE_CHECKING:
    from pipeline.core.config import Settings

# Fixed, so the same data always gets the same interval and the same shares.
BOOTSTRAP_SEED = 20_231_123
SHAPLEY_SEED = 7
# Bootstrap weights are drawn in blocks of about this many cells (resamples x rows).
_BLOCK_CELLS = 2_000_000

EXACT = "exact"
SAMPLED = "kernel_shap"
# Why a player was rejected: its share was not positive, or the batch was within noise.
SHARE_REJECTED = "share"
NOISE = "noise"


@dataclass(frozen=True)
class ValuationSettings:
    resamples: int = 1000
    level: float = 0.95
    exact_max_players: int = 6
    shapley_budget: int = 128
    workers: int = 1

    @classmethod
    def from_settings(cls, settings: Settings) -> ValuationSettings:
        return cls(
            resamples=settings.valuation_bootstrap_resamples,
            level=settings.valuation_confidence_level,
            exact_max_players=settings.valuation_exact_max_players,
            shapley_budget=settings.valuation_shapley_budget,
            workers=settings.parallel_workers,
        )


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap interval of an improvement, in percent."""

    low: float
    high: float
    level: float
    resamples: int
    # The resamples' standard deviation: the standard error the try budget's bounds use.
    se: float = math.nan

    def describe(self) -> str:
        return f"{self.level:.0%} interval [{self.low:+.2f}, {self.high:+.2f}] %"

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class Player:
    """One contribution of a batch: its key (job id) and the rows to value."""

    key: str
    frame: pd.DataFrame
    fingerprint: str = ""

    @property
    def rows(self) -> int:
        return len(self.frame)


def frame_fingerprint(frame: pd.DataFrame) -> str:
    """A hash of a frame's rows and columns: equal frames get equal fingerprints."""
    digest = hashlib.sha256()
    digest.update("\x1f".join(map(str, frame.columns)).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


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

    @property
    def significant(self) -> bool:
        return self.interval is not None and self.interval.low > 0 and bool(self.accepted)


def improvement_interval(
    without: Predictions,
    with_: Predictions,
    *,
    higher_is_better: bool,
    denominator: float,
    resamples: int,
    level: float,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """Paired percentile bootstrap of the improvement from `without` to `with_`, in percent.

    Each resample draws the benchmark rows with replacement (the same rows for both models,
    hence paired) and recomputes both metrics on it, vectorised over a block of resamples.
    """
    rows = len(without.y_true)
    rng = np.random.default_rng(seed)
    block = max(1, min(resamples, _BLOCK_CELLS // max(rows, 1)))
    sign = 1.0 if higher_is_better else -1.0
    gains: list[np.ndarray] = []
    done = 0
    while done < resamples:
        size = min(block, resamples - done)
        draws = rng.integers(0, rows, size=(size, rows))
        offsets = (np.arange(size) * rows)[:, None]
        counts = np.bincount((draws + offsets).ravel(), minlength=size * rows).reshape(size, rows)
        gains.append(sign * (metric_samples(with_, counts) - metric_samples(without, counts)))
        done += size
    values = np.concatenate(gains) / denominator * 100.0
    values = values[np.isfinite(values)]
    if not len(values):
        return Interval(math.nan, math.nan, level, 0)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return Interval(float(low), float(high), level, len(values), float(np.std(values)))


# --- Shapley values ----------------------------------------------------------------------------

Coalition = frozenset[int]


def exact_shapley(players: Sequence[int], value: Callable[[Coalition], float]) -> dict[int, float]:
    """Exact Shapley values of `players` for the game `value` (v(∅) must be 0)."""
    n = len(players)
    weights = [math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n) for k in range(n)]
    shares = dict.fromkeys(players, 0.0)
    for i in players:
        others = [p for p in players if p != i]
        for k in range(n):
            for subset in itertools.combinations(others, k):
                s = frozenset(subset)
                shares[i] += weights[k] * (value(s | {i}) - value(s))
    return shares


def kernel_coalitions(players: int, budget: int) -> dict[tuple[int, ...], float]:
    """Coalitions of range(players) and their regression weights for KernelSHAP.

    Coalition sizes are taken in pairs (s, n - s) from the outside in, as the Shapley kernel
    weighs them most; a pair is enumerated whole while the budget allows, with its kernel
    weights. The rest of the budget samples the remaining sizes (probability by their kernel
    weight, uniform within a size) with each coalition's complement, seeded, sharing the
    remaining weight equally. With a budget of 2^n - 2 every coalition is enumerated and the
    result is the exact Shapley value.
    """
    n = players
    size_weight = {s: (n - 1) / (s * (n - s)) for s in range(1, n)}
    scale = math.fsum(size_weight.values())
    size_weight = {s: w / scale for s, w in size_weight.items()}
    chosen: dict[tuple[int, ...], float] = {}
    left = budget
    remaining = list(range(1, n))
    for small in range(1, n // 2 + 1):
        pair = sorted({small, n - small})
        count = sum(math.comb(n, s) for s in pair)
        if count > left:
            break
        for size in pair:
            for c in itertools.combinations(range(n), size):
                chosen[c] = size_weight[size] / math.comb(n, size)
            remaining.remove(size)
        left -= count
    if remaining and left >= 2:
        rng = np.random.default_rng(SHAPLEY_SEED)
        mass = math.fsum(size_weight[s] for s in remaining)
        p = np.array([size_weight[s] / mass for s in remaining])
        draws = left // 2
        for _ in range(draws):
            size = int(rng.choice(remaining, p=p))
            members = tuple(sorted(int(i) for i in rng.choice(n, size, replace=False)))
            complement = tuple(i for i in range(n) if i not in members)
            for c in (members, complement):
                chosen[c] = chosen.get(c, 0.0) + mass / (2 * draws)
    return chosen


def kernel_shapley(
    players: Sequence[int], value: Callable[[Coalition], float], budget: int
) -> dict[int, float]:
    """Shapley values estimated by KernelSHAP: a weighted least-squares fit of v over the
    coalitions of `kernel_coalitions`, constrained to add up to v(all players).
    """
    n = len(players)
    total = value(frozenset(players))
    if n == 1:
        return {players[0]: total}
    coalitions = kernel_coalitions(n, budget)
    z = np.zeros((len(coalitions), n))
    for row, c in enumerate(coalitions):
        z[row, list(c)] = 1.0
    y = np.array([value(frozenset(players[i] for i in c)) for c in coalitions])
    w = np.array(list(coalitions.values()))
    # Lagrangian of min sum w (y - z phi)^2 subject to sum phi = total.
    system = np.zeros((n + 1, n + 1))
    system[:n, :n] = 2 * z.T @ (w[:, None] * z)
    system[:n, n] = system[n, :n] = 1.0
    rhs = np.append(2 * z.T @ (w * y), total)
    solution = np.linalg.lstsq(system, rhs, rcond=None)[0]
    return {p: float(solution[i]) for i, p in enumerate(players)}


def sampling_budget(players: int, budget: int) -> int:
    """Coalitions KernelSHAP trains: `budget`, but at least every (n-1)- and 1-player one."""
    return max(budget, 2 * players)


def coalitions_needed(players: Sequence[int], exact_max: int, budget: int) -> list[Coalition]:
    """Every non-empty coalition the Shapley computation of `players` will ask for."""
    if len(players) <= exact_max:
        return [
            frozenset(c)
            for k in range(1, len(players) + 1)
            for c in itertools.combinations(players, k)
        ]
    coalitions = kernel_coalitions(len(players), sampling_budget(len(players), budget))
    return [frozenset(players[i] for i in c) for c in coalitions] + [frozenset(players)]


# --- a batch -----------------------------------------------------------------------------------


class _Game:
    """v(S) for coalitions of players, each trained once and cached."""

    def __init__(
        self,
        scorer: BenchmarkScorer,
        base: pd.DataFrame | None,
        players: Sequence[Player],
        higher_is_better: bool,
        workers: int,
    ) -> None:
        self.scorer = scorer
        self.players = players
        self.higher_is_better = higher_is_better
        self.workers = max(1, workers)
        self.base = base if base is not None and len(base) else pd.DataFrame()
        self.without = scorer.predict(self.base)
        self.score_without = metric_score(self.without)
        self.denominator = improvement_denominator(self.score_without, scorer.floor)
        self.scores: dict[Coalition, float] = {}
        self.trained = 1

    def frame(self, coalition: Coalition) -> pd.DataFrame:
        parts = [self.base, *(self.players[i].frame for i in sorted(coalition))]
        return pd.concat([p for p in parts if len(p)], ignore_index=True)

    def predictions(self, coalition: Coalition) -> Predictions:
        return self.scorer.predict(self.frame(coalition))

    def improvement(self, score: float) -> float:
        gain = score - self.score_without
        return (gain if self.higher_is_better else -gain) / self.denominator * 100.0

    def prepare(self, coalitions: Sequence[Coalition]) -> None:
        """Train the coalitions not yet scored, on `workers` threads."""
        missing = [c for c in dict.fromkeys(coalitions) if c and c not in self.scores]
        if not missing:
            return
        if self.workers == 1 or len(missing) == 1:
            scores = [metric_score(self.predictions(c)) for c in missing]
        else:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(missing))) as pool:
                scores = list(pool.map(lambda c: metric_score(self.predictions(c)), missing))
        self.scores.update(zip(missing, scores, strict=True))
        self.trained += len(missing)

    def value(self, coalition: Coalition) -> float:
        if not coalition:
            return 0.0
        if coalition not in self.scores:
            self.prepare([coalition])
        return self.improvement(self.scores[coalition])


def value_batch(
    scorer: BenchmarkScorer,
    base: pd.DataFrame | None,
    players: Sequence[Player],
    *,
    higher_is_better: bool,
    settings: ValuationSettings,
) -> BatchValuation:
    """Value a batch's players against the model trained on `base` (see the module docstring).

    Players with identical rows are one player of the game (trained on once), and its value is
    split equally between them: a copy neither doubles the pay nor takes a bigger part of the
    pool from the others.
    """
    units = _units(players)
    game = _Game(scorer, base, [unit[0] for unit in units], higher_is_better, settings.workers)
    method = EXACT if len(units) <= settings.exact_max_players else SAMPLED
    active, shares, rejected, proportional = _play_rounds(game, len(units), settings)

    final = frozenset(active) if active else frozenset(range(len(units)))
    with_predictions = game.predictions(final)
    score_with = metric_score(with_predictions)
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
    )


def _units(players: Sequence[Player]) -> list[list[Player]]:
    """Players grouped by identical rows, in canonical order (by content): the submission
    order changes nothing."""
    groups: dict[str, list[Player]] = {}
    for player in players:
        fingerprint = player.fingerprint or frame_fingerprint(player.frame)
        groups.setdefault(fingerprint, []).append(Player(player.key, player.frame, fingerprint))
    return [sorted(groups[f], key=lambda p: p.key) for f in sorted(groups)]


def _play_rounds(
    game: _Game, units: int, settings: ValuationSettings
) -> tuple[list[int], dict[int, float], dict[int, str], bool]:
    """Shapley rounds: units with a share not above 0 are rejected and the rest play again.

    Returns the units left, every unit's last share, the rejected units with why, and whether
    the shares left must be scaled to their own pool (a sampled round is not replayed).
    """
    active = list(range(units))
    rejected: dict[int, str] = {}
    shares: dict[int, float] = {}
    while active:
        game.prepare(coalitions_needed(active, settings.exact_max_players, settings.shapley_budget))
        exact = len(active) <= settings.exact_max_players
        if exact:
            round_shares = exact_shapley(active, game.value)
        else:
            budget = sampling_budget(len(active), settings.shapley_budget)
            round_shares = kernel_shapley(active, game.value, budget)
        shares.update(round_shares)
        losing = [i for i in active if round_shares[i] <= 0]
        rejected.update(dict.fromkeys(losing, SHARE_REJECTED))
        if not losing:
            break
        active = [i for i in active if round_shares[i] > 0]
        if not exact:
            # Replaying a sampled game would cost another budget of models: the rest share
            # their own pool in proportion to the values they were just given.
            return active, shares, rejected, True
    return active, shares, rejected, False


def valuation_view(quality: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job view's `valuation`: pool, share, interval and integrity counts of a job.

    Read from the job's `quality` JSON (`valuation` written by
    `pipeline.evaluation.batch_valuation`, `integrity` by the integrity check, `reward` by
    `pipeline.rewards.payouts`); None before valuation.
    """
    quality = quality or {}
    valuation = quality.get("valuation")
    if not valuation:
        return None
    interval = valuation.get("interval")
    reward = quality.get("reward") or {}
    return {
        "valuationId": valuation.get("valuation_id"),
        "accepted": valuation.get("accepted"),
        "metricName": valuation.get("metric"),
        "scoreWithout": valuation.get("score_without"),
        "scoreWith": valuation.get("score_with"),
        "poolPct": valuation.get("pool_pct"),
        "sharePct": valuation.get("share_pct"),
        "interval": (
            {k: interval[k] for k in ("low", "high", "level", "resamples")} if interval else None
        ),
        "method": valuation.get("method"),
        "batchSize": valuation.get("batch_size"),
        "batchRows": valuation.get("batch_rows"),
        "valuedRows": valuation.get("valued_rows"),
        "tokensEarned": reward.get("total_tokens"),
        "cap": reward.get("cap"),
        "integrity": quality.get("integrity"),
        "budget": quality.get("budget"),  # pipeline.rewards.budget.Decision.view
    }
