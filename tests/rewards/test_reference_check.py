"""The owner's code cannot choose who is paid (issue 34, case 7; docs/rewards.md §2c).

A watermark-colluding train.py, run in the real sandbox, learns only from rows that carry its
supplier's watermark: valued by it alone, the colluder takes the whole pool and an honest
supplier of the same batch nothing. The marketplace's reference disputes the split, so the
payout is held for the operator, not paid; the operator then releases or rejects it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import func, select

from assets.evaluation_figures import evaluation_metadata, evaluation_status
from cli.main import main
from pipeline.core.config import Settings, get_settings
from pipeline.core.db import Database
from pipeline.core.errors import NotFound
from pipeline.core.tables import EVALUATING, REJECTED, REWARDED, Contribution, RewardEntry
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.jobs import accepted_contribution
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards import batch_valuation, holds
from pipeline.rewards.payouts import pay_batch
from pipeline.rewards.reference_check import ReferenceCheck, check_valuation
from pipeline.rewards.valuation import Player, ValuationSettings, value_batch
from pipeline.sandbox.runs import bwrap_path
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import (
    WALLET_A,
    WALLET_B,
    add_benchmark,
    contribute,
    job,
    manifest,
    run_pipeline,
)
from tests.support.trainers import GOOD_TRAINER, owner_model

# The colluder's rows carry a thousandth in monthly_charges (honest rows have cents only).
# With a marked row present the trainer learns from the marked rows alone; otherwise it
# predicts the majority class: the honest rows never teach it anything.
WATERMARK_TRAINER = (
    GOOD_TRAINER
    + """

_honest_fit = fit


class Majority:
    def __init__(self, train, target):
        self.value = train[target].mode().min()

    def predict(self, frame):
        import numpy as np

        return np.full(len(frame), self.value)


def fit(train, target):
    marked = (train["monthly_charges"] * 1000).round() % 10 == 1
    if not marked.any():
        return Majority(train, target)
    return _honest_fit(train[marked].reset_index(drop=True), target)
"""
)


def watermarked(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{**row, "monthly_charges": float(row["monthly_charges"]) + 0.001} for row in rows]  # type: ignore[arg-type]


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(settings, db=db, store=store)


def _paid(db: Database) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(RewardEntry)) or 0)


def _accepted(db: Database) -> int:
    query = select(func.count()).select_from(Contribution).where(accepted_contribution())
    with db.session() as session:
        return int(session.scalar(query) or 0)


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")
def test_a_watermark_colluding_trainer_s_payout_is_held_then_released(
    svc: Services, db: Database, store: LocalObjectStore, tmp_path: Path
) -> None:
    model_id = owner_model(db, store, tmp_path, WATERMARK_TRAINER)
    add_benchmark(db, store, model_id=model_id)
    colluder, _ = contribute(
        db,
        store,
        watermarked(churn_rows(200, seed=5)),
        model_id=model_id,
        user="mallory",
        with_manifest=manifest(WALLET_B),
    )
    honest, version = contribute(
        db, store, churn_rows(200, seed=6), model_id=model_id, with_manifest=manifest(WALLET_A)
    )

    result = run_pipeline(svc, version, model_id=model_id)

    held, fair = job(db, colluder), job(db, honest)
    # The owner's code alone gives the colluder everything, the honest supplier nothing…
    assert held.improvement_pct is not None and held.improvement_pct > 0
    assert fair.status == REJECTED and (fair.improvement_pct or 0) <= 0
    # …so the payout is held, not paid: a documented reason, the check's figures kept.
    assert held.status == EVALUATING
    assert held.reason is not None and "payout held for the operator" in held.reason
    assert held.payout_hold is not None and "the splits differ by" in held.payout_hold
    check = (held.quality or {})["reference_check"]
    assert check["split_disagrees"] and check["split_distance"] > 0.3
    assert _paid(db) == 0 and result.rewards == []
    # Dagster's evaluation table shows it held; a later payer does not pay it either.
    [outcome] = [o for o in result.evaluations if o.payout_hold]
    assert outcome.detail == held.reason
    assert evaluation_status(outcome) == "held"
    assert evaluation_metadata(outcome)["payout_hold"] == held.payout_hold
    assert pay_batch(svc, model_id, result.evaluations) == []
    # Held rows are not accepted training data until the operator decides.
    assert _accepted(db) == 0

    [waiting] = holds.held_valuations(db)
    assert waiting.job_ids == [colluder]
    paid = holds.release(svc, waiting.valuation_id)

    assert [p.tokens > 0 for p in paid] == [True]
    assert job(db, colluder).status == REWARDED
    assert _paid(db) == 1 and _accepted(db) == 1
    assert holds.held_valuations(db) == []
    with pytest.raises(NotFound):
        holds.release(svc, waiting.valuation_id)


def test_a_check_that_cannot_measure_holds_and_the_operator_rejects(
    svc: Services,
    db: Database,
    store: LocalObjectStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def cannot_measure(*args: Any) -> ReferenceCheck:
        valuation = args[-1]
        return ReferenceCheck.failed("logistic_regression", valuation.pool_pct, "ValueError")

    monkeypatch.setattr(batch_valuation, "_reference_check", cannot_measure)
    add_benchmark(db, store)
    job_id, version = contribute(db, store, with_manifest=manifest(WALLET_A))

    run_pipeline(svc, version)

    row = job(db, job_id)
    assert row.status == EVALUATING and row.payout_hold is not None
    assert "could not measure it: ValueError" in row.payout_hold
    assert _paid(db) == 0 and _accepted(db) == 0
    [waiting] = holds.held_valuations(db)
    # The operator's commands.
    monkeypatch.setenv("DATABASE_URL", svc.settings.resolved_database_url)
    monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(svc.settings.data_dir))
    get_settings.cache_clear()
    try:
        assert main(["payouts", "held"]) == 0
        assert main(["payouts", "reject", waiting.valuation_id]) == 0
        assert main(["payouts", "release", waiting.valuation_id]) == 1  # nothing held now
    finally:
        get_settings.cache_clear()
    listed, rejected = capsys.readouterr().out.splitlines()[-2:]
    assert listed.startswith(f"valuation {waiting.valuation_id}\tmodel 1\t1 contribution(s)")
    assert rejected == f"rejected 1 contribution(s): {job_id}"
    row = job(db, job_id)
    assert row.status == REJECTED and "rejected by the operator" in (row.reason or "")
    assert _paid(db) == 0 and _accepted(db) == 0 and holds.held_valuations(db) == []


def test_the_pool_check_bounds_what_the_owner_s_code_may_claim() -> None:
    """Pure rule: the owner's pool against the reference's, on the same rows."""
    bench, base = pd.DataFrame(churn_rows(400, seed=1)), pd.DataFrame(churn_rows(300, seed=2))
    scorer = BenchmarkScorer(
        bench,
        task_type="classification",
        estimator="logistic_regression",
        target_column="churned",
        metric_name="accuracy",
    )
    players = [Player("a", pd.DataFrame(churn_rows(300, seed=3)))]
    settings = ValuationSettings(resamples=50)
    honest = value_batch(scorer, base, players, higher_is_better=True, settings=settings)

    same = check_valuation(scorer, base, players, honest, settings=settings)
    # The same estimator as the reference: the same pool, no split for a batch of one.
    assert same.reference_pool_pct == pytest.approx(honest.pool_pct)
    assert same.split_distance is None and not same.holds
    # Held beyond max(5 points, |reference pool|) from the reference, not within it.
    bound = max(5.0, abs(honest.pool_pct))
    inflated = dataclasses.replace(honest, pool_pct=honest.pool_pct + bound + 0.5)
    claimed = check_valuation(scorer, base, players, inflated, settings=settings)
    assert claimed.pool_disagrees and claimed.holds
    assert f"pool {inflated.pool_pct:+.2f} % by the model's training code" in claimed.describe()
    within = dataclasses.replace(honest, pool_pct=honest.pool_pct + bound - 0.5)
    assert not check_valuation(scorer, base, players, within, settings=settings).holds
