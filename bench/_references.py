"""The expected-game references of issue 35: computed by `python bench/expected_game.py`, stored
in `bench/references/`, compared with the deployed payout by `bench/_payout.py`.

Not `bench/_expected_game.py`: that older module is the faithfulness part's forest-only
reference (seed blocks of one forest, all on the same rows). This one is the issue's definition,
for any estimator of the catalog.

The scenario is `scale_scenario(accepted, players, 10 * players + seed, estimator)`, as the
payout bench builds it. Fit k (k = 0..K-1) trains on the accepted rows kept by its own keyed
90 % subsample, `keyed_uniform(row_keys(accepted, used columns), FIT_SALT + k) < 0.9`, plus the
coalition's contribution rows. The subsample is of the accepted data only: a contribution's
rows are always in. The same K subsamples serve every coalition. Each fit is the service's own
(the model's estimator and preprocessing) under a seed of its own, as the deployed paired fits
draw theirs (`BenchmarkScorer.predict_fit`, seeds `REFERENCE_FIT + k`, apart from the deployed
fits' 0..K-1): the game averages a forest's seed as well as its rows.

The game of fits F (all K, or one half): m_F(S) = the mean over F of the benchmark scores with
S's rows, and v_F(S) = (m_F(S) - m_F(∅)) / improvement_denominator(m_F(∅), metric floor) x 100,
sign-flipped when lower is better. Its split is played as the service plays it (players whose
Shapley value is <= 0 leave, the rest play again: `paid_fractions`); its pool is v_F(players
left), 0 when none is left. Fractions are each player's share of that pool, 0 when it left.

Floors, from a halving of the K fits into halves A and B, two independent games:
- floor_split = max over players of |fraction in A - fraction in B|, in % of the pool;
- floor_pool = |pool of A - pool of B|, in % of the full game's pool (100 when that is <= 0);
each the mean over `HALVINGS` seeded random halvings (every halving when there are fewer). One
halving is a draw of two numbers: on the same 16 fits its floor_pool ranged from 1 to 21.

A stored reference carries `code`, a digest of what defines the game (`code_digest`); one made
by other code is stale, and `load` says so instead of returning it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from bench import _expected_game, _faithfulness
from bench._faithfulness_scale import scale_scenario
from pipeline.evaluation.metrics import improvement_denominator, metric_score
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.row_keys import keyed_uniform, row_keys
from pipeline.rewards.shapley import Coalition
from pipeline.rewards.valuation import Player

DIRECTORY = Path(__file__).resolve().parent / "references"
FITS = 16
KEEP = 0.9
# Fit k's subsample salt is FIT_SALT + k: far from the folds' PAIRED_SALT and from the small
# salts of a forest's trees and the surrogate's sample.
FIT_SALT = 0x6578_7067_616D_0000  # "expgam" in ASCII
# Fit k's seed is the catalog seed's paired fit REFERENCE_FIT + k: no deployed fit draws it.
REFERENCE_FIT = 1_000
HALVINGS = 256
HALVING_SEED = 35
ROOT = Path(__file__).resolve().parent.parent
# The files whose text defines the game (the scenario's data, the fits, the scores, the split);
# with `_SOURCES_IN_PART` (only what the game uses of a bench module) and the versions below.
SOURCES = (
    "bench/_references.py",
    "pipeline/demo/churn_data.py",
    "pipeline/evaluation/metrics.py",
    "pipeline/evaluation/scorer.py",
    "pipeline/models/estimators.py",
    "pipeline/models/keyed_forest.py",
    "pipeline/models/one_hot.py",
    "pipeline/models/paired_fits.py",
    "pipeline/models/preprocessing.py",
    "pipeline/models/row_keys.py",
    "pipeline/rewards/shapley.py",
)
_SOURCES_IN_PART: tuple[Callable[..., Any], ...] = (scale_scenario, _expected_game.paid_fractions)
VERSIONED = ("sklearn", "pandas", "numpy")  # pandas hashes the row keys


def code_digest(root: Path = ROOT) -> str:
    """sha256 over the game's sources (`SOURCES` under `root`, the source of the functions in
    `_SOURCES_IN_PART`, the noise levels of the scenario) and the versions of `VERSIONED`."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    for function in _SOURCES_IN_PART:
        digest.update(inspect.getsource(function).encode() + b"\0")
    digest.update(repr(_faithfulness.NOISE_LEVELS).encode() + b"\0")
    for module in VERSIONED:
        digest.update(f"{module} {__import__(module).__version__}\0".encode())
    return digest.hexdigest()


def all_coalitions(n: int) -> list[Coalition]:
    return [frozenset(c) for size in range(n + 1) for c in combinations(range(n), size)]


def accepted_keys(scorer: BenchmarkScorer, base: pd.DataFrame) -> np.ndarray:
    """The row keys of the labelled accepted rows, over the columns the model uses."""
    train = scorer.labelled(base)
    return row_keys(train, [*scorer.feature_columns(train), scorer.target_column])


def subsample_masks(scorer: BenchmarkScorer, base: pd.DataFrame, fits: int) -> list[np.ndarray]:
    """Which accepted rows fit k keeps, for each k (module docstring)."""
    keys = accepted_keys(scorer, base)
    return [keyed_uniform(keys, FIT_SALT + k) < KEEP for k in range(fits)]


def coalition_scores(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    players: Sequence[Player],
    fits: int = FITS,
    workers: int = 2,
) -> dict[Coalition, np.ndarray]:
    """Every coalition's K benchmark scores, fit k on subsample k of `base` plus its rows."""
    train = scorer.labelled(base)
    run = Parallel(n_jobs=max(workers, 1), backend="threading")
    masks = subsample_masks(scorer, base, fits)
    jobs = [(c, k) for c in all_coalitions(len(players)) for k in range(fits)]
    found: dict[Coalition, np.ndarray] = {}
    chunk = max(2 * workers, 1)  # a few frames at a time: 100,000 rows each at scale
    for start in range(0, len(jobs), chunk):
        part = jobs[start : start + chunk]
        frames = [
            pd.concat([train[masks[k]], *(players[i].frame for i in sorted(c))], ignore_index=True)
            for c, k in part
        ]
        calls = [
            delayed(scorer.predict_fit)(frame, REFERENCE_FIT + k)
            for frame, (_, k) in zip(frames, part, strict=True)
        ]
        for (c, k), predictions in zip(part, run(calls), strict=True):
            found.setdefault(c, np.full(fits, np.nan))[k] = metric_score(predictions)
    return found


@dataclass(frozen=True)
class Split:
    """The split of one game: fractions of the pool (0 when left) and the pool in %."""

    fractions: np.ndarray
    pool: float


@dataclass
class Reference:
    """One scenario's coalition scores and what follows from them (module docstring)."""

    scenario: dict[str, Any]  # estimator, accepted, players, seed
    keys: list[str]  # the players' keys, in the scenario's order
    scores: dict[Coalition, np.ndarray]
    metric_floor: float
    higher_is_better: bool
    code: str
    seconds: float = math.nan

    @property
    def fits(self) -> int:
        return len(self.scores[frozenset()])

    def value(self, fits: slice | np.ndarray) -> Callable[[Coalition], float]:
        """v_F of the fits `fits` (module docstring)."""
        without = float(np.mean(self.scores[frozenset()][fits]))
        denominator = improvement_denominator(without, self.metric_floor)
        sign = 1.0 if self.higher_is_better else -1.0
        return lambda c: sign * (float(np.mean(self.scores[c][fits])) - without) / denominator * 100

    def split(self, fits: slice | np.ndarray = slice(None)) -> Split:
        value = self.value(fits)
        fractions, _ = _expected_game.paid_fractions(value, len(self.keys))
        kept = frozenset(int(i) for i in np.flatnonzero(fractions > 0))
        return Split(fractions, value(kept) if kept else 0.0)

    def halvings(self) -> list[np.ndarray]:
        """Half A's fits of each halving of the floors (module docstring); B is the rest."""
        half = self.fits // 2
        if math.comb(self.fits, half) // 2 <= HALVINGS:  # each halving once: fit 0 in A
            return [np.array((0, *rest)) for rest in combinations(range(1, self.fits), half - 1)]
        rng = np.random.default_rng(HALVING_SEED)
        return [np.sort(rng.choice(self.fits, half, replace=False)) for _ in range(HALVINGS)]

    def halves(self, a: np.ndarray) -> tuple[Split, Split]:
        return self.split(a), self.split(np.setdiff1d(np.arange(self.fits), a))

    def floors(self) -> tuple[float, float]:
        """(floor_split, floor_pool) in % (module docstring)."""
        pool = self.split().pool
        splits, pools = [], []
        for a, b in map(self.halves, self.halvings()):
            splits.append(float(np.max(np.abs(a.fractions - b.fractions))) * 100.0)
            pools.append(abs(a.pool - b.pool) / pool * 100.0 if pool > 0 else 100.0)
        return float(np.mean(splits)), float(np.mean(pools))

    def to_json(self) -> dict[str, Any]:
        full = self.split()
        floor_split, floor_pool = self.floors()
        return {
            "scenario": self.scenario,
            "fits": self.fits,
            "code": self.code,
            "keys": self.keys,
            "metric_floor": self.metric_floor,
            "higher_is_better": self.higher_is_better,
            "seconds": round(self.seconds, 1),
            "pool_pct": full.pool,
            "fractions": dict(zip(self.keys, full.fractions.tolist(), strict=True)),
            "halvings": len(self.halvings()),
            "floor_split_pct_of_pool": floor_split,
            "floor_pool_pct": floor_pool,
            # Each coalition (its players' indices joined by ",") to its K scores, fit by fit.
            "scores": {
                ",".join(map(str, sorted(c))): s.tolist()
                for c, s in sorted(self.scores.items(), key=lambda item: sorted(item[0]))
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reference:
        scores = {
            frozenset(int(i) for i in name.split(",") if i): np.asarray(values, dtype=float)
            for name, values in data["scores"].items()
        }
        return cls(
            scenario=data["scenario"],
            keys=list(data["keys"]),
            scores=scores,
            metric_floor=float(data["metric_floor"]),
            higher_is_better=bool(data["higher_is_better"]),
            code=data["code"],
            seconds=float(data.get("seconds", math.nan)),
        )


def file_name(estimator: str, accepted: int, players: int, seed: int, fits: int) -> str:
    return f"{estimator}_{accepted}_p{players}_s{seed}_k{fits}.json"


def compute(
    estimator: str,
    accepted: int,
    players: int,
    seed: int,
    fits: int = FITS,
    workers: int = 2,
    clock: Callable[[], float] | None = None,
) -> Reference:
    """The reference of the payout bench's scenario (module docstring)."""
    clock = clock or time.perf_counter
    started = clock()
    scorer, base, contributions = scale_scenario(accepted, players, 10 * players + seed, estimator)
    scores = coalition_scores(scorer, base, contributions, fits, workers)
    scenario = {"estimator": estimator, "accepted": accepted, "players": players, "seed": seed}
    return Reference(
        scenario,
        [p.key for p in contributions],
        scores,
        scorer.floor,
        higher_is_better=True,  # the scenario's metric is accuracy
        code=code_digest(),
        seconds=clock() - started,
    )


def save(reference: Reference, directory: Path = DIRECTORY) -> Path:
    s = reference.scenario
    path = directory / file_name(
        s["estimator"], s["accepted"], s["players"], s["seed"], reference.fits
    )
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(reference.to_json(), indent=1) + "\n")
    return path


def load(
    estimator: str,
    accepted: int,
    players: int,
    seed: int,
    directory: Path = DIRECTORY,
    digest: str | None = None,
) -> tuple[Reference | None, str]:
    """The scenario's fresh stored reference with the most fits, and why not when None:
    "missing", or "stale" (every stored one made by other code than `digest`, the current
    `code_digest()` by default)."""
    prefix = f"{estimator}_{accepted}_p{players}_s{seed}_k"
    stored = {p: p.stem.removeprefix(prefix) for p in directory.glob(f"{prefix}*.json")}
    found = sorted((p for p, k in stored.items() if k.isdigit()), key=lambda p: int(stored[p]))
    if not found:
        return None, "missing"
    digest = digest or code_digest()
    for path in reversed(found):
        reference = Reference.from_json(json.loads(path.read_text()))
        if reference.code == digest:
            return reference, "fresh"
    return None, "stale"
