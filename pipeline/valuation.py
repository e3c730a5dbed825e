"""Valuation of a batch of contributions: significance, bounded improvement and fair shares.

The contributions one run evaluates together (its *batch*) are valued as players of a game
whose value is the improvement their rows bring over the model trained on the accepted data:

    v(S) = improvement_pct(score(accepted + S), score(accepted), floor)      v(∅) = 0

measured in percent against the metric's floor (`pipeline.evaluation.improvement_floor`),
so a sabotaged or near-zero baseline cannot turn a modest gain into thousands of percent.

- **Shares**: each contribution's share is its Shapley value in that game; the shares add up to
  the pool v(batch). Up to `exact_max_players` players the value is exact (every coalition is
  trained); beyond, it is estimated by antithetic permutation sampling with a fixed budget of
  `shapley_budget` coalitions (`budget // players` permutations, at least 2, seeded), so the
  cost of a large batch grows with the size of its training sets, not with its players'
  count. Sampled values of players with identical rows are averaged (symmetry), and every
  sampled permutation adds up to the pool exactly (efficiency).
- **Order-free**: players are put in a canonical order (a hash of their rows) before anything
  is trained, so the order in which they were submitted changes nothing.
- **Non-positive shares**: a contribution whose share is ≤ 0 does not help the model; it is
  rejected and not trained on, and the game is played again among the others, whose shares
  then add up to the pool of the remaining set. This repeats until every share is positive.
- **Significance**: the pool is paid only when the lower bound of a paired bootstrap
  confidence interval of v(remaining set) over the benchmark rows is above 0; otherwise the
  whole batch is within noise and rejected.

Pure computation on DataFrames: `pipeline.scoring` reads and writes the database around it.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.evaluation import (
    BenchmarkScorer,
    Predictions,
    improvement_denominator,
    metric_samples,
    metric_score,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from pipeline.config import Settings

# Fixed, so the same data always gets the same interval and the same shares.
BOOTSTRAP_SEED = 20_231_123
SHAPLEY_SEED = 7
# Bootstrap weights are drawn in blocks of about this many cells (resamples x rows).
_BLOCK_CELLS = 2_000_000

EXACT = "exact"
PERMUTATION = "permutation"
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
    import pandas as pd

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
    import numpy as np

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
    return Interval(float(low), float(high), level, len(values))


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


def permutations_for(players: int, budget: int) -> list[list[int]]:
    """Seeded antithetic permutations of range(players): `budget // players` (even, ≥ 2)."""
    import numpy as np

    count = max(2, budget // max(players, 1))
    count += count % 2
    rng = np.random.default_rng(SHAPLEY_SEED)
    result: list[list[int]] = []
    for _ in range(count // 2):
        order = [int(i) for i in rng.permutation(players)]
        result.extend([order, order[::-1]])
    return result


def sampled_shapley(
    players: Sequence[int], value: Callable[[Coalition], float], budget: int
) -> dict[int, float]:
    """Shapley values estimated from seeded antithetic permutations (see the module docstring)."""
    orders = permutations_for(len(players), budget)
    shares = dict.fromkeys(players, 0.0)
    for order in orders:
        previous, prefix = 0.0, frozenset[int]()
        for position in order:
            player = players[position]
            prefix = prefix | {player}
            current = value(prefix)
            shares[player] += current - previous
            previous = current
    return {p: total / len(orders) for p, total in shares.items()}


def coalitions_needed(players: Sequence[int], exact_max: int, budget: int) -> list[Coalition]:
    """Every non-empty coalition the Shapley computation of `players` will ask for."""
    if len(players) <= exact_max:
        return [
            frozenset(c)
            for k in range(1, len(players) + 1)
            for c in itertools.combinations(players, k)
        ]
    needed: dict[Coalition, None] = {}
    for order in permutations_for(len(players), budget):
        prefix = frozenset[int]()
        for position in order:
            prefix = prefix | {players[position]}
            needed[prefix] = None
    return list(needed)


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
        import pandas as pd

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
        import pandas as pd

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
    """Value a batch's players against the model trained on `base` (see the module docstring)."""
    ordered = sorted(
        (
            p if p.fingerprint else Player(p.key, p.frame, frame_fingerprint(p.frame))
            for p in players
        ),
        key=lambda p: (p.fingerprint, p.key),
    )
    game = _Game(scorer, base, ordered, higher_is_better, settings.workers)
    active = list(range(len(ordered)))
    method = EXACT if len(active) <= settings.exact_max_players else PERMUTATION
    rejected: dict[str, str] = {}
    shares: dict[str, float] = {}
    while active:
        exact = len(active) <= settings.exact_max_players
        game.prepare(coalitions_needed(active, settings.exact_max_players, settings.shapley_budget))
        if exact:
            round_shares = exact_shapley(active, game.value)
        else:
            round_shares = _symmetrised(
                sampled_shapley(active, game.value, settings.shapley_budget), ordered
            )
        for i, share in round_shares.items():
            shares[ordered[i].key] = share
        losing = [i for i in active if round_shares[i] <= 0]
        for i in losing:
            rejected[ordered[i].key] = SHARE_REJECTED
        if not losing:
            break
        active = [i for i in active if round_shares[i] > 0]

    final = frozenset(active) if active else frozenset(range(len(ordered)))
    with_predictions = game.predictions(final)
    score_with = metric_score(with_predictions)
    pool = game.improvement(score_with) if active else 0.0
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
            for i in active:
                rejected[ordered[i].key] = NOISE
    accepted = [ordered[i].key for i in active if ordered[i].key not in rejected]
    return BatchValuation(
        metric_name=scorer.metric.name,
        direction="higher_is_better" if higher_is_better else "lower_is_better",
        score_without=game.score_without,
        score_with=score_with,
        pool_pct=pool,
        interval=interval,
        denominator=game.denominator,
        method=method,
        players=len(ordered),
        accepted=accepted,
        rejected=rejected,
        shares=shares,
        coalitions=game.trained,
    )


def _symmetrised(shares: dict[int, float], players: Sequence[Player]) -> dict[int, float]:
    """Average sampled values over players with identical rows (they are symmetric)."""
    groups: dict[str, list[int]] = {}
    for i in shares:
        groups.setdefault(players[i].fingerprint, []).append(i)
    result = {}
    for members in groups.values():
        mean = math.fsum(shares[i] for i in members) / len(members)
        result.update(dict.fromkeys(members, mean))
    return result


def valuation_view(quality: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job view's `valuation`: pool, share, interval and integrity counts of a job.

    Read from the job's `quality` JSON (`valuation` written by `pipeline.scoring`, `integrity`
    by the integrity check, `reward` by `pipeline.payouts`); None before valuation.
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
    }
