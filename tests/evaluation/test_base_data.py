"""The owner's base training data (issue 17 §1): the benchmark file's rows of other splits.

Rows whose `split` is not the benchmark's `eval_split` are the model's base training data: every
evaluation trains on them ("without": base + accepted, "with": base + accepted + the batch),
the figures show how many there were, rows a contribution repeats from them earn nothing, and a
new benchmark version replaces them. On SQLite and PostgreSQL through the domain pipeline; the
valuation itself on scikit-learn's breast-cancer data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer
from sqlalchemy import select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import REJECTED, REWARDED, Evaluation
from pipeline.demo.churn_data import churn_benchmark_rows, churn_rows
from pipeline.evaluation.datasets import benchmark_base_rows, benchmark_eval_rows
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.ledger import model_evaluations, wallet_rewards
from pipeline.rewards.valuation import Player, ValuationSettings, value_batch
from pipeline.rewards.valuation_view import valuation_view
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import (
    WALLET_A,
    add_benchmark,
    contribute,
    job,
    manifest,
    run_pipeline,
)


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(settings, db=db, store=store)


def churn_benchmark(train_share: float, seed: int = 4, count: int = 900) -> list[dict[str, Any]]:
    return churn_benchmark_rows(count, seed=seed, train_share=train_share)


def base_of(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return benchmark_base_rows(pd.DataFrame(rows), "test")


def churn_scorer(rows: list[dict[str, Any]]) -> BenchmarkScorer:
    return BenchmarkScorer(
        benchmark_eval_rows(pd.DataFrame(rows), "test"),
        task_type="classification",
        estimator="logistic_regression",
        target_column="churned",
        metric_name="accuracy",
    )


def contribution_evaluation(db: Database) -> Evaluation:
    with db.session() as session:
        found = session.scalars(
            select(Evaluation)
            .where(Evaluation.valuation_id.is_not(None))
            .order_by(Evaluation.created_at.desc())
        ).first()
        assert found is not None
        return found


def test_every_evaluation_trains_on_the_base_data_and_shows_its_size(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    rows = churn_benchmark(train_share=0.15)
    base = base_of(rows)
    add_benchmark(db, store, rows)
    job_id, version = contribute(
        db, store, churn_rows(600, seed=31), with_manifest=manifest(WALLET_A)
    )

    run_pipeline(svc, version)

    evaluation = contribution_evaluation(db)
    scorer = churn_scorer(rows)
    # "without" is the owner's model: trained on the base rows, not the majority class.
    assert evaluation.baseline_score == pytest.approx(scorer.score(base))
    assert evaluation.base_rows == len(base) > 100
    row = job(db, job_id)
    assert row.status == REWARDED, row.reason
    view = valuation_view(row.quality)
    assert view is not None and view["baseRows"] == len(base)
    entry = wallet_rewards(db, WALLET_A)["entries"][0]
    assert entry["baseRows"] == len(base)
    history = model_evaluations(db, 1)["evaluations"]
    rescore = next(e for e in history if e["kind"] == "rescore")
    assert rescore["baseRows"] == len(base)
    assert next(e for e in history if e["kind"] == "contribution")["baseRows"] == len(base)


def test_rows_already_in_the_base_data_earn_nothing(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    rows = churn_benchmark(train_share=0.4)
    base = base_of(rows)
    add_benchmark(db, store, rows)
    copied = base.to_dict("records")

    # Only base rows: already contributed, and the reason says whose rows they are. Never
    # benchmark leakage: only the evaluation split is the benchmark.
    all_known, version = contribute(db, store, copied)
    run_pipeline(svc, version)
    row = job(db, all_known)
    assert row.status == REJECTED
    assert (row.reason or "").startswith(f"already contributed: {len(base)} of {len(base)}")
    assert f"({len(base)} of them in the owner's base training data)" in (row.reason or "")
    assert row.quality is not None
    assert row.quality["integrity"]["known_base_rows"] == len(base)

    # Half base rows, half new ones: only the new rows are valued.
    fresh = churn_rows(len(base), seed=77)
    mixed, version = contribute(db, store, copied + fresh, user="bob")
    run_pipeline(svc, version)
    row = job(db, mixed)
    assert row.quality is not None
    assert row.quality["valuation"]["valued_rows"] == len(fresh)
    assert (
        f"{len(base)} of {2 * len(base)} rows are already in the model's training data "
        f"({len(base)} in the owner's base training data) and earn nothing"
    ) in (row.reason or "")

    # The evaluation rows are still the benchmark: copying them is leakage.
    test_rows = benchmark_eval_rows(pd.DataFrame(rows), "test").to_dict("records")
    leaked, version = contribute(db, store, test_rows[:200], user="carol")
    run_pipeline(svc, version)
    assert (job(db, leaked).reason or "").startswith("contains rows of the model's benchmark")


def test_a_new_benchmark_version_replaces_the_base_data(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    first = churn_benchmark(train_share=0.4, seed=4)
    add_benchmark(db, store, first)
    second = churn_benchmark(train_share=0.2, seed=5)
    add_benchmark(db, store, second)
    # The first version's base rows are no longer trained on: they count as new rows.
    old_base = base_of(first).to_dict("records")
    job_id, version = contribute(db, store, old_base)

    run_pipeline(svc, version)

    assert contribution_evaluation(db).base_rows == len(base_of(second)) != len(old_base)
    row = job(db, job_id)
    assert row.quality is not None
    assert row.quality["integrity"]["known_rows"] == 0
    assert row.quality["valuation"]["valued_rows"] == len(old_base)


def test_base_data_turns_a_model_from_nothing_into_a_few_percent() -> None:
    """Breast cancer: the same 200 rows are worth tens of percent to a model trained on nothing
    and a few percent to the owner's model trained on its own 120 rows."""
    frame: pd.DataFrame = load_breast_cancer(as_frame=True).frame
    frame = frame.sample(frac=1.0, random_state=3).reset_index(drop=True)
    bench, base, contribution = frame.iloc[:249], frame.iloc[249:369], frame.iloc[369:]
    scorer = BenchmarkScorer(
        bench,
        task_type="classification",
        estimator="logistic_regression",
        target_column="target",
        metric_name="accuracy",
    )
    settings = ValuationSettings(resamples=200)
    player = [Player("c", contribution.reset_index(drop=True))]
    from_nothing = value_batch(scorer, None, player, higher_is_better=True, settings=settings)
    on_base = value_batch(scorer, base, player, higher_is_better=True, settings=settings)
    assert from_nothing.pool_pct > 30
    assert on_base.score_without == pytest.approx(scorer.score(base))
    assert on_base.score_without > 0.9
    assert abs(on_base.pool_pct) < 5
