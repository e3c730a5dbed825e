"""The payout bench's scenarios (issue 35): churn with a catalog estimator, or the loan demo with
its owner's trainer; and where each one's expected-game reference comes from.

`LOAN_TRAINER` stands in the benches' estimator lists for the loan-default demo model's own
`train.py` (`pipeline/demo/loan_default/`: HistGradientBoosting on ordinal codes), run in the
sandbox as the service runs it (bubblewrap, the default limits). The scenario mirrors the churn
one (`scale_scenario`): `accepted` loan rows of borrowers with fewer than `LATE_GAP` late
payments (an owner who never lent to the others: its trees cannot know how they default), a
10,000-row benchmark, and `players` contributions of 1,000 rows drawn like the benchmark, with
seeded label noise.

The references (`python bench/expected_game.py --estimators loan_trainer`) are the expected
game of `bench/_references.py` on this scenario. Their digest adds this module, the loan data
and the trainer to the churn references' digest, so a change here makes only these stale. The
owner's code draws its own seed (a fixed `random_state`): its fits differ by their subsample.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from bench import _references
from bench._faithfulness import NOISE_LEVELS
from bench._faithfulness_scale import scale_scenario
from pipeline.core.config import load_settings
from pipeline.demo.loan_data import loan_rows
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.valuation import Player
from pipeline.sandbox.runner import OwnerTrainer, SubprocessRunner
from pipeline.sandbox.runs import SandboxLimits

LOAN_TRAINER = "loan_trainer"
ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "pipeline" / "demo" / "loan_default"
LATE_GAP = 2  # about 13 % of the drawn rows have more
SOURCES = (
    "bench/_scenarios.py",
    "pipeline/demo/loan_data.py",
    "pipeline/demo/loan_default/train.py",
)

Scenario = tuple[BenchmarkScorer, pd.DataFrame, list[Player]]


def owner_trainer() -> OwnerTrainer:
    """The loan demo's train.py in the sandbox, with the service's default limits."""
    settings = load_settings()
    return OwnerTrainer(
        FOLDER,
        "train:fit",
        SubprocessRunner(),
        SandboxLimits.from_settings(settings),
        settings.trainer_isolation,
    )


def loan_scenario(accepted: int, players: int, seed: int) -> Scenario:
    """The scenario of the module docstring, `seed` as `scale_scenario` takes it."""
    rng = np.random.default_rng(seed)
    drawn = pd.DataFrame(loan_rows(int(accepted * 1.3) + 1000, seed=seed + 17))
    base = drawn[drawn["late_payments"] < LATE_GAP].iloc[:accepted].reset_index(drop=True)
    contributions = []
    for i in range(players):
        rows = pd.DataFrame(loan_rows(1000, seed=seed * 100 + i + 31))
        noisy = rng.random(len(rows)) < rng.choice(NOISE_LEVELS)
        shuffled = rng.permutation(rows["defaulted"].to_numpy())[: noisy.sum()]
        rows.loc[noisy, "defaulted"] = shuffled
        contributions.append(Player(f"c{i}", rows))
    scorer = BenchmarkScorer(
        pd.DataFrame(loan_rows(10_000, seed=1)),
        task_type="classification",
        estimator=None,
        trainer=owner_trainer(),
        target_column="defaulted",
        metric_name="accuracy",
    )
    return scorer, base, contributions


def scenario(accepted: int, players: int, seed: int, estimator: str) -> Scenario:
    """The payout bench's scenario of `estimator`: the loan one for `LOAN_TRAINER`."""
    if estimator == LOAN_TRAINER:
        return loan_scenario(accepted, players, seed)
    return scale_scenario(accepted, players, seed, estimator)


def code_digest() -> str:
    """The churn references' digest, with this scenario's sources."""
    digest = hashlib.sha256(_references.code_digest().encode() + b"\0")
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()


def digest_of(estimator: str) -> str:
    """The digest a fresh reference of `estimator`'s scenarios carries."""
    return code_digest() if estimator == LOAN_TRAINER else _references.code_digest()


def load(
    estimator: str,
    accepted: int,
    players: int,
    seed: int,
    directory: Path = _references.DIRECTORY,
) -> tuple[_references.Reference | None, str]:
    """`_references.load` with the digest of `estimator`'s scenarios."""
    return _references.load(estimator, accepted, players, seed, directory, digest_of(estimator))


def compute(
    estimator: str,
    accepted: int,
    players: int,
    seed: int,
    fits: int = _references.FITS,
    workers: int = 2,
) -> _references.Reference:
    """The expected-game reference of `estimator`'s scenario."""
    if estimator == LOAN_TRAINER:
        return compute_loan(accepted, players, seed, fits, workers)
    return _references.compute(estimator, accepted, players, seed, fits, workers)


def compute_loan(
    accepted: int,
    players: int,
    seed: int,
    fits: int = _references.FITS,
    workers: int = 2,
    clock: Callable[[], float] | None = None,
) -> _references.Reference:
    """The expected game of the loan scenario (`bench/_references.py`'s definition)."""
    clock = clock or time.perf_counter
    started = clock()
    scorer, base, contributions = loan_scenario(accepted, players, 10 * players + seed)
    scores = _references.coalition_scores(scorer, base, contributions, fits, workers)
    return _references.Reference(
        {"estimator": LOAN_TRAINER, "accepted": accepted, "players": players, "seed": seed},
        [p.key for p in contributions],
        scores,
        scorer.floor,
        higher_is_better=True,  # accuracy
        code=code_digest(),
        seconds=clock() - started,
    )
