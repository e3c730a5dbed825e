"""Processing of dataset versions (spec §1, §2.5, §8): statuses, checks, evaluation, rewards.

Domain level, without Dagster, on SQLite and PostgreSQL; `tests/assets/test_assets.py` runs the same
chain through the assets.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pandas as pd
import pytest
from sqlalchemy import func, select

from pipeline.checks.batch import count_spec_violations, run_quality_checks, verdict
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import DomainError
from pipeline.core.tables import (
    EVALUATING,
    QUEUED,
    REJECTED,
    REWARDED,
    VALIDATING,
    Contribution,
    Evaluation,
    RewardEntry,
)
from pipeline.demo.churn_data import churn_benchmark_rows, churn_rows
from pipeline.evaluation.claims import claim_batch
from pipeline.evaluation.datasets import benchmark_eval_rows
from pipeline.evaluation.rescore import rescore_model
from pipeline.models.definitions import demo_definition
from pipeline.rewards.formula import to_checksum_address
from pipeline.rewards.payouts import pay_evaluation
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore, dataset_key
from tests.support.pipeline import (
    WALLET_A,
    WALLET_B,
    WALLET_C,
    add_benchmark,
    add_external,
    add_tickets_model,
    contribute,
    job,
    manifest,
    run_pipeline,
    ticket_rows,
)


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(settings, db=db, store=store)


def ledger(db: Database) -> list[tuple[str, float, str | None]]:
    with db.session() as session:
        rows = session.scalars(select(RewardEntry).order_by(RewardEntry.id)).all()
        return [(r.wallet_address, r.tokens, r.contribution_id) for r in rows]


def evaluations(db: Database) -> list[Evaluation]:
    with db.session() as session:
        return list(session.scalars(select(Evaluation).order_by(Evaluation.created_at)))


# --- a good contribution ---------------------------------------------------------------------


def test_good_contribution_is_rewarded_and_paid_to_its_manifest_wallet(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    job_id, version = contribute(db, store, with_manifest=manifest(WALLET_A))

    result = run_pipeline(svc, version)

    row = job(db, job_id)
    assert row.status == REWARDED
    assert row.improvement_pct is not None and row.improvement_pct > 10
    assert row.tokens is not None and row.tokens > 0
    assert "rewarded" in (row.reason or "") and "accuracy" in (row.reason or "")
    assert row.quality is not None
    assert row.quality["checks"]["passed"] is True
    assert row.quality["checks"]["row_count"] == 200
    assert row.quality["pii"]["found"] is False
    reward = row.quality["reward"]
    # The reward formula of pipeline/rewards/formula.py on the measured figures.
    expected = round(
        row.improvement_pct
        * reward["quality_factor"]
        * math.log10(200)
        / 4
        * reward["uniqueness_factor"],
        6,
    )
    assert reward["total_tokens"] == pytest.approx(expected, abs=1e-6)
    assert ledger(db) == [(WALLET_A, row.tokens, job_id)]
    assert [r.version for r in result.rewards] == [version]
    scored = [e for e in evaluations(db) if e.dataset_version_id is not None]
    contribution_eval = scored[-1]
    assert contribution_eval.trigger == "arrival"
    assert contribution_eval.run_id == "test-run"
    assert contribution_eval.baseline_score is not None
    assert contribution_eval.baseline_score == pytest.approx(0.72, abs=0.1)
    assert contribution_eval.score > contribution_eval.baseline_score


def test_tokens_are_split_by_manifest_weights(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    shared = manifest(
        WALLET_A,
        contributors=[
            {"id": "a", "wallet_address": WALLET_B, "weight": 0.6},
            {"id": "b", "wallet_address": WALLET_C, "weight": 0.4},
        ],
    )
    job_id, version = contribute(db, store, with_manifest=shared)
    run_pipeline(svc, version)

    row = job(db, job_id)
    entries = ledger(db)
    assert {wallet for wallet, _, _ in entries} == {
        to_checksum_address(WALLET_B),
        to_checksum_address(WALLET_C),
    }
    assert len(entries) == 2
    assert math.isclose(sum(t for _, t, _ in entries), row.tokens or 0, abs_tol=1e-9)
    by_weight = sorted(t for _, t, _ in entries)
    assert by_weight[1] == pytest.approx((row.tokens or 0) * 0.6, abs=1e-5)


def test_stored_profile_manifest_pays_when_the_contribution_has_none(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    from pipeline.rewards.ledger import put_profile

    put_profile(db, "bob", manifest(WALLET_B, contributor_id="bob"))
    add_benchmark(db, store)
    job_id, version = contribute(db, store, user="bob")
    run_pipeline(svc, version)

    assert job(db, job_id).status == REWARDED
    assert [w for w, _, _ in ledger(db)] == ["0x8617E340B3D01FA5F11F306F4090FD50E238070D"]
    assert "contributor profile" in (job(db, job_id).reason or "")


def test_without_any_manifest_nothing_is_paid_and_the_reason_says_why(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    job_id, version = contribute(db, store, user="carol")
    run_pipeline(svc, version)

    row = job(db, job_id)
    assert row.status == REWARDED
    assert row.tokens == 0
    assert "nothing was paid" in (row.reason or "")
    assert "PUT /api/contributors/me" in (row.reason or "")
    assert row.quality and row.quality["reward"]["total_tokens"] > 0
    assert ledger(db) == []


# --- rejections --------------------------------------------------------------------------------


def test_low_quality_contribution_is_rejected_before_evaluation(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    rows = churn_rows(60, seed=3) * 3  # 180 rows, a third of them unique
    job_id, version = contribute(db, store, rows, with_manifest=manifest())
    result = run_pipeline(svc, version)

    row = job(db, job_id)
    assert row.status == REJECTED
    assert (row.reason or "").startswith("quality checks failed: unique rows 33.3%")
    assert row.quality and row.quality["checks"]["passed"] is False
    assert row.improvement_pct is None and row.tokens is None
    assert [o.version for o in result.evaluations if o.kind == "contribution"] == []
    assert ledger(db) == []


def test_too_few_rows_is_rejected(svc: Services, db: Database, store: LocalObjectStore) -> None:
    add_benchmark(db, store)
    job_id, version = contribute(db, store, churn_rows(40, seed=9))
    run_pipeline(svc, version)
    assert job(db, job_id).status == REJECTED
    assert "rows 40 (at least 100 required)" in (job(db, job_id).reason or "")


def test_contribution_with_pii_is_rejected(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = add_tickets_model(db)
    add_benchmark(db, store, ticket_rows(150, seed=1), model_id=model_id, target_column="escalated")
    job_id, version = contribute(
        db, store, ticket_rows(200, with_emails=True, seed=2), model_id=model_id
    )
    run_pipeline(svc, version, model_id=model_id)

    row = job(db, job_id)
    assert row.status == REJECTED
    assert (row.reason or "").startswith("PII scan failed: PII found in 1 column(s): comment:")
    assert "EMAIL_ADDRESS" in (row.reason or "")
    assert "@example.com" not in (row.reason or "")  # values never leak into reasons
    assert row.quality and row.quality["pii"]["found"] is True


def test_pii_detection_off_lets_the_same_data_through(
    make_settings: object, db: Database, store: LocalObjectStore
) -> None:
    settings = make_settings(enable_pii_detection=False)  # type: ignore[operator]
    svc = Services(settings, db=db, store=store)
    model_id = add_tickets_model(db)
    add_benchmark(db, store, ticket_rows(150, seed=1), model_id=model_id, target_column="escalated")
    job_id, version = contribute(
        db, store, ticket_rows(200, with_emails=True, seed=2), model_id=model_id
    )
    run_pipeline(svc, version, model_id=model_id)

    row = job(db, job_id)
    assert row.status == REWARDED, row.reason
    assert row.quality and row.quality["pii"]["skipped"] is True


def test_contribution_that_does_not_improve_is_rejected_with_the_scores(
    settings: Settings, db: Database, store: LocalObjectStore
) -> None:
    # Inverted labels are quarantined by the label check (tests/checks/test_integrity.py); with the
    # widest margin it lets them through, so evaluation's own verdict is tested here.
    svc = Services(settings.model_copy(update={"label_disagreement_margin": 1.0}), db, store)
    add_benchmark(db, store)
    first_id, first = contribute(db, store, churn_rows(300, seed=2), with_manifest=manifest())
    run_pipeline(svc, first)
    flipped = [{**r, "churned": 1 - r["churned"]} for r in churn_rows(300, seed=4)]
    job_id, version = contribute(db, store, flipped, with_manifest=manifest(WALLET_B))
    run_pipeline(svc, version)

    row = job(db, job_id)
    assert row.status == REJECTED
    assert (row.reason or "").startswith("no improvement: accuracy 0.")
    assert row.improvement_pct is not None and row.improvement_pct <= 0
    assert [w for w, _, _ in ledger(db)] == [WALLET_A]  # only the first contribution paid
    assert job(db, first_id).status == REWARDED


def test_unreadable_external_version_is_rejected(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    version = add_external(
        db,
        store,
        b"\x00\x01 not,a\ncsv\x00\x00\xff\xfe",
        filename="x.parquet",
        file_format="parquet",
    )
    run_pipeline(svc, version)
    with db.session() as session:
        row = session.scalar(select(Contribution).where(Contribution.submitter_id == "external"))
    assert row is not None and row.status == REJECTED
    assert (row.reason or "").startswith("unreadable dataset: not a valid PARQUET file")


def test_external_version_with_a_manifest_beside_it_is_evaluated_and_paid(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    payload = pd.DataFrame(churn_rows(250, seed=8)).to_csv(index=False).encode()
    version = add_external(db, store, payload)
    store.put_bytes(
        dataset_key(1, version, "manifest.json"), json.dumps(manifest(WALLET_C)).encode()
    )
    run_pipeline(svc, version)
    with db.session() as session:
        row = session.scalar(select(Contribution).where(Contribution.submitter_id == "external"))
    assert row is not None and row.status == REWARDED, row and row.reason
    assert row.submitted_rows == 250
    assert [w for w, _, _ in ledger(db)] == [WALLET_C]


def test_external_version_with_an_unusable_manifest_is_not_paid_and_the_reason_names_it(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    payload = pd.DataFrame(churn_rows(250, seed=8)).to_csv(index=False).encode()
    version = add_external(db, store, payload)
    store.put_bytes(dataset_key(1, version, "manifest.json"), b'{"wallet_address": "0x12"}')
    run_pipeline(svc, version)
    with db.session() as session:
        row = session.scalar(select(Contribution).where(Contribution.submitter_id == "external"))
    assert row is not None and row.status == REWARDED
    reason = row.reason or ""
    assert "the manifest.json manifest is invalid" in reason
    assert "contributor_id: Field required" in reason and "wallet_address: " in reason
    assert "license: Field required" in reason
    assert ledger(db) == []


def test_data_spec_violations_are_counted_per_row() -> None:
    spec = demo_definition().data_spec
    rows = churn_rows(10, seed=1)
    rows[2]["contract"] = "weekly"
    rows[5]["support_calls"] = -1
    frame = pd.DataFrame(rows)
    frame.loc[7, "payment_method"] = None  # optional: a missing cell is an absent property
    assert count_spec_violations(frame, spec, batch_size=3) == 2


def test_strict_mode_turns_a_column_warning_into_a_rejection(
    make_settings: object, db: Database, store: LocalObjectStore
) -> None:
    rows = churn_rows(200, seed=12)
    for row in rows[:30]:
        del row["payment_method"]  # 85 % filled: a column warning, table still > 95 %
    add_benchmark(db, store)
    lenient_id, lenient = contribute(db, store, rows, with_manifest=manifest())
    run_pipeline(Services(make_settings(), db=db, store=store), lenient)  # type: ignore[operator]
    assert job(db, lenient_id).status == REWARDED
    strict_id, strict = contribute(db, store, rows, with_manifest=manifest())
    strict_settings = make_settings(data_validation_strict=True)  # type: ignore[operator]
    run_pipeline(Services(strict_settings, db=db, store=store), strict)
    assert job(db, strict_id).status == REJECTED
    assert "column payment_method completeness 85.0%" in (job(db, strict_id).reason or "")


# --- batches, benchmarks and re-scores ------------------------------------------------------


def test_debounced_run_processes_every_pending_version_in_order(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    _, bench = add_benchmark(db, store)
    jobs = [
        contribute(db, store, churn_rows(150, seed=20 + i), with_manifest=manifest())
        for i in range(3)
    ]
    result = run_pipeline(svc, jobs[-1][1])  # one run, for the newest version

    assert result.batch.versions == [bench, *(v for _, v in jobs)]
    statuses = [job(db, job_id).status for job_id, _ in jobs]
    assert set(statuses) <= {REWARDED, REJECTED} and REWARDED in statuses
    scored = [o for o in result.evaluations if o.kind == "contribution"]
    assert [o.version for o in scored] == [v for _, v in jobs]
    with db.session() as session:
        rows = session.scalars(select(Evaluation).where(Evaluation.valuation_id.is_not(None))).all()
    # The three were valued together, against the same baseline (the trivial one), as one
    # valuation whose accepted shares add up to its pool.
    assert len(rows) == 3 and len({e.valuation_id for e in rows}) == 1
    assert len({e.baseline_score for e in rows}) == 1
    assert all(e.batch_size == 3 for e in rows)
    accepted = [e.improvement_pct or 0 for e in rows if (e.improvement_pct or 0) > 0]
    assert math.fsum(accepted) == pytest.approx(rows[0].pool_pct)
    # Nothing is left for the next run.
    assert claim_batch(svc, 1, jobs[-1][1]).items == ()


def test_a_later_version_is_not_claimed_by_an_earlier_partition(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    first_id, first = contribute(db, store, seed=1)
    second_id, _ = contribute(db, store, seed=2)
    batch = claim_batch(svc, 1, first)
    assert batch.versions == [first]
    assert job(db, first_id).status == VALIDATING
    assert job(db, second_id).status == QUEUED
    assert claim_batch(svc, 1, first).items == ()  # claimed once only


def test_without_a_benchmark_a_contribution_waits_then_is_evaluated(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    job_id, version = contribute(db, store, with_manifest=manifest())
    run_pipeline(svc, version)
    row = job(db, job_id)
    assert row.status == QUEUED
    assert "waiting for a benchmark" in (row.reason or "")
    assert row.quality and row.quality["checks"]["passed"] is True

    _, bench_version = add_benchmark(db, store)
    result = run_pipeline(svc, bench_version)
    assert result.batch.versions == [version, bench_version]
    assert job(db, job_id).status == REWARDED


def test_schedule_run_rescores_the_model_on_its_accepted_rows(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    _, bench = add_benchmark(db, store)
    run_pipeline(svc, bench)  # the benchmark's own re-score
    _, version = contribute(db, store, with_manifest=manifest())
    run_pipeline(svc, version)
    before = len(evaluations(db))

    result = run_pipeline(svc, version, trigger="schedule")

    assert result.batch.items == () and result.batch.rescore
    history = evaluations(db)
    assert len(history) == before + 1
    latest = history[-1]
    assert latest.trigger == "schedule" and latest.dataset_version_id is None
    contribution_eval = history[-2]
    assert latest.score == pytest.approx(contribution_eval.score)  # same accepted rows
    assert latest.baseline_score == pytest.approx(contribution_eval.baseline_score)


def test_a_new_benchmark_version_rescores_the_model_on_it(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    _, version = contribute(db, store, with_manifest=manifest())
    run_pipeline(svc, version)
    spec_id, bench = add_benchmark(db, store, churn_benchmark_rows(200, seed=30), metric_name="f1")
    result = run_pipeline(svc, bench)

    assert result.batch.versions == [bench]
    [outcome] = result.evaluations
    assert outcome.kind == "rescore" and outcome.metric_name == "f1"
    latest = evaluations(db)[-1]
    assert latest.benchmark_spec_id == spec_id and latest.trigger == "arrival"
    assert latest.dataset_version_id is not None
    # A re-run finds the benchmark evaluated and the model unchanged since: nothing to do (a
    # backfill of every partition does not re-score the same model once per partition).
    scored = len(evaluations(db))
    again = run_pipeline(svc, bench, trigger="manual")
    assert again.batch.items == () and not again.batch.rescore and again.evaluations == []
    assert len(evaluations(db)) == scored
    # Once a valuation changed the model, a run with nothing pending scores it again.
    _, newer = contribute(db, store, seed=31, with_manifest=manifest())
    run_pipeline(svc, newer)
    changed = run_pipeline(svc, bench, trigger="manual")
    assert changed.batch.rescore and changed.evaluations[0].kind == "rescore"
    assert evaluations(db)[-1].trigger == "manual"


def test_benchmark_split_column_selects_the_evaluation_rows() -> None:
    frame = pd.DataFrame(churn_benchmark_rows(100, seed=3, train_share=0.3))
    test_rows = benchmark_eval_rows(frame, "test")
    assert len(test_rows) == int((frame["split"] == "test").sum())
    assert "split" not in test_rows.columns
    assert len(benchmark_eval_rows(frame.drop(columns=["split"]), "test")) == 100
    with pytest.raises(DomainError, match="no rows with split 'holdout'"):
        benchmark_eval_rows(frame, "holdout")


def test_rescore_without_benchmark_records_nothing(svc: Services, db: Database) -> None:
    assert rescore_model(svc, 1, trigger="manual") is None
    assert evaluations(db) == []


# --- idempotency -------------------------------------------------------------------------------


def test_paying_an_evaluation_twice_writes_the_ledger_once(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    job_id, version = contribute(db, store, with_manifest=manifest())
    result = run_pipeline(svc, version)
    [evaluation_id] = [o.evaluation_id for o in result.evaluations if o.kind == "contribution"]
    assert evaluation_id is not None

    again = pay_evaluation(svc, evaluation_id)
    run_pipeline(svc, version)  # a re-run of the partition: nothing pending

    assert again is not None and again.detail == "already paid"
    with db.session() as session:
        count = session.scalar(select(func.count()).select_from(RewardEntry))
    assert count == 1
    assert job(db, job_id).status == REWARDED


def test_a_run_stopped_before_rewards_is_paid_by_the_next_run(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    from pipeline.checks.batch import describe_batch, run_pii_scans, run_quality_checks
    from pipeline.evaluation.claims import claim_batch
    from pipeline.rewards.batch_scoring import evaluate_batch

    add_benchmark(db, store)
    job_id, version = contribute(db, store, with_manifest=manifest())
    batch = claim_batch(svc, 1, version, trigger="arrival")
    describe_batch(svc, batch)
    run_quality_checks(svc, batch)
    run_pii_scans(svc, batch)
    evaluate_batch(svc, batch)  # ... and the run dies here
    assert job(db, job_id).status == EVALUATING

    run_pipeline(svc, version, trigger="manual")
    assert job(db, job_id).status == REWARDED
    assert len(ledger(db)) == 1


def test_verdict_blocks_only_when_nothing_is_left(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    _, bad = contribute(db, store, churn_rows(40, seed=1))
    alone = claim_batch(svc, 1, bad)
    outcomes = run_quality_checks(svc, alone)
    result = verdict(alone, outcomes, db, "quality checks")
    assert not result.passed and result.blocking
    assert result.failed_versions == [bad]
    assert result.description.startswith(f"quality checks failed for {bad}: rows 40")

    # The same failure beside a benchmark re-score does not stop the run.
    _, bench = add_benchmark(db, store)
    _, bad_again = contribute(db, store, churn_rows(40, seed=2))
    beside = claim_batch(svc, 1, bad_again)
    assert beside.versions == [bench, bad_again]
    mixed = verdict(beside, run_quality_checks(svc, beside), db, "quality checks")
    assert not mixed.passed and not mixed.blocking

    # Nothing pending: a re-score, the check passes with nothing to check.
    empty = claim_batch(svc, 1, bad_again)
    nothing = verdict(empty, run_quality_checks(svc, empty), db, "quality checks")
    assert nothing.passed and not nothing.blocking
