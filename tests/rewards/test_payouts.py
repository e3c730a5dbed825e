"""Payouts that hold up against gaming (issue 9 §4, §5), through the pipeline and the store.

Real data (scikit-learn's bundled breast-cancer and diabetes sets), on SQLite and PostgreSQL:
significance, bounded improvements, never training on rejected rows, fair shares in a batch,
caps, all-or-nothing payment, and the figures a supplier sees.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from cli.main import main
from pipeline.checks.batch import describe_batch, run_pii_scans, run_quality_checks
from pipeline.core.config import get_settings
from pipeline.core.db import Database
from pipeline.core.tables import (
    EVALUATING,
    REJECTED,
    REWARDED,
    Contribution,
    Evaluation,
    RewardEntry,
)
from pipeline.core.token_units import UNITS_PER_TOKEN, tokens_from_units
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.claims import claim_batch
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.rewards.batch_scoring import evaluate_batch
from pipeline.rewards.formula import volume_factor
from pipeline.rewards.ledger import accepted_data
from pipeline.rewards.payouts import pay_batch
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import (
    WALLET_A,
    WALLET_B,
    WALLET_C,
    add_benchmark,
    contribute,
    job,
    manifest,
    run_pipeline,
)
from tests.support.threads import run_together
from tests.support.valuation import CANCER, DIABETES, register_frame_model, rows

# Few resamples keep the suite fast; the rules do not depend on the count.
FAST = {"valuation_bootstrap_resamples": 200, "enable_pii_detection": False}


@pytest.fixture
def svc(make_settings: Any, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(make_settings(**FAST), db=db, store=store)


def ledger(db: Database, model_id: int | None = None) -> dict[str, float]:
    """Tokens per job id."""
    with db.session() as session:
        query = select(RewardEntry)
        if model_id is not None:
            query = query.where(RewardEntry.model_id == model_id)
        totals: dict[str, float] = {}
        for entry in session.scalars(query):
            key = entry.contribution_id or ""
            totals[key] = totals.get(key, 0.0) + entry.tokens
        return totals


def cancer_model(db: Database, store: LocalObjectStore, name: str = "breast-cancer") -> int:
    model_id = register_frame_model(
        db, name, CANCER, task_type="classification", estimator="logistic_regression"
    )
    add_benchmark(
        db,
        store,
        rows(CANCER.iloc[:169]),
        model_id=model_id,
        target_column="target",
        metric_name="accuracy",
        metric_direction="higher_is_better",
    )
    return model_id


def diabetes_model(db: Database, store: LocalObjectStore) -> int:
    model_id = register_frame_model(
        db, "diabetes", DIABETES, task_type="regression", estimator="linear_regression"
    )
    add_benchmark(
        db,
        store,
        rows(DIABETES.iloc[:192]),
        model_id=model_id,
        target_column="target",
        metric_name="r2",
        metric_direction="higher_is_better",
    )
    return model_id


LABEL_CHECK_ON = {"test_the_sabotage_itself_is_quarantined_by_the_label_check"}


@pytest.fixture(autouse=True)
def valuation_alone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests value data that the label check (tests/checks/test_integrity.py) quarantines
    first, e.g. targets shrunk to the mean; to test the valuation rules behind it, the label check
    reports "not measured" here, except in the tests of LABEL_CHECK_ON."""
    if request.node.originalname not in LABEL_CHECK_ON:
        monkeypatch.setattr("pipeline.checks.integrity.check_labels", lambda *_a, **_k: None)


def shrunk_to_the_mean(k: float) -> list[dict[str, Any]]:
    """Diabetes rows whose targets keep only `k` of their spread around the mean."""
    frame = DIABETES.iloc[192:342].copy()
    frame["target"] = frame.target.mean() + k * (frame.target - frame.target.mean())
    return rows(frame)


# --- §4 significance, floors and the "without" baseline ----------------------------------------


def test_a_gain_within_noise_is_rejected_with_its_interval_and_never_trained_on(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = diabetes_model(db, store)
    useless_id, useless = contribute(
        db, store, shrunk_to_the_mean(0.02), model_id=model_id, with_manifest=manifest()
    )
    run_pipeline(svc, useless, model_id=model_id)

    row = job(db, useless_id)
    assert row.status == REJECTED
    reason = row.reason or ""
    assert reason.startswith("within noise: r2 0.0000 → 0.0091 (+0.91 %, 95% interval [-")
    assert "the lower bound is not above 0" in reason
    assert ledger(db) == {}
    assert accepted_data(db, model_id)["versions"] == []
    with db.session() as session:
        evaluation = session.scalars(
            select(Evaluation).where(Evaluation.valuation_id.is_not(None))
        ).one()
    assert evaluation.interval_low is not None and evaluation.interval_low < 0
    assert evaluation.interval_high is not None and evaluation.interval_high > 0.91
    assert evaluation.interval_level == 0.95 and evaluation.resamples == 200

    # The honest contribution after it is measured against the honest baseline.
    honest_id, honest = contribute(
        db, store, rows(DIABETES.iloc[342:]), model_id=model_id, with_manifest=manifest(WALLET_B)
    )
    run_pipeline(svc, honest, model_id=model_id)
    paid = job(db, honest_id)
    assert paid.status == REWARDED, paid.reason
    # r2 0 → 0.496 on 100 rows: 49.6 points x volume 0.5.
    assert paid.tokens == pytest.approx(49.61 * 0.5, abs=0.05)


def test_the_sabotage_itself_is_quarantined_by_the_label_check(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    # The attack with every check on: targets shrunk to the mean never reach valuation.
    model_id = diabetes_model(db, store)
    for k in (0.02, 0.05):
        job_id, version = contribute(
            db, store, shrunk_to_the_mean(k), model_id=model_id, with_manifest=manifest()
        )
        run_pipeline(svc, version, model_id=model_id)
        row = job(db, job_id)
        assert row.status == REJECTED
        assert (row.reason or "").startswith("labels quarantined: targets (1 - R²) disagree")
    assert ledger(db) == {}
    assert accepted_data(db, model_id)["versions"] == []


def test_a_sabotaged_regression_baseline_does_not_inflate_the_next_payout(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    """Issue 9: 5,860 tokens for "+10,772 %" after a supplier made the model near useless."""
    model_id = diabetes_model(db, store)
    _, useless = contribute(
        db, store, shrunk_to_the_mean(0.05), model_id=model_id, with_manifest=manifest()
    )
    run_pipeline(svc, useless, model_id=model_id)
    honest_id, honest = contribute(
        db, store, rows(DIABETES.iloc[342:]), model_id=model_id, with_manifest=manifest(WALLET_B)
    )
    run_pipeline(svc, honest, model_id=model_id)

    row = job(db, honest_id)
    assert row.status == REWARDED
    valuation = (row.quality or {})["valuation"]
    assert valuation["score_without"] == pytest.approx(0.038, abs=0.005)  # the sabotaged model
    # Measured in r2 points (floor 1.0), not relative to 0.038: +30.9 %, not +800 %.
    assert 25 < valuation["pool_pct"] < 35
    assert row.tokens is not None and 10 < row.tokens < 20


def test_a_contribution_that_makes_the_model_worse_is_never_training_data(
    svc: Services,
    db: Database,
    store: LocalObjectStore,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model_id = cancer_model(db, store)
    good_a, good_b = rows(CANCER.iloc[169:269]), rows(CANCER.iloc[269:369])
    flipped = [{**r, "target": 1 - r["target"]} for r in rows(CANCER.iloc[369:469])]
    a_id, _ = contribute(db, store, good_a, model_id=model_id, with_manifest=manifest(WALLET_A))
    bad_id, _ = contribute(db, store, flipped, model_id=model_id, with_manifest=manifest(WALLET_C))
    b_id, last = contribute(
        db, store, good_b, model_id=model_id, user="bob", with_manifest=manifest(WALLET_B)
    )
    run_pipeline(svc, last, model_id=model_id)  # one batch of three

    bad = job(db, bad_id)
    assert bad.status == REJECTED
    assert (bad.reason or "").startswith("no improvement: its share of the batch's accuracy")
    assert "not trained on" in (bad.reason or "")
    assert job(db, a_id).status == job(db, b_id).status == REWARDED
    audit = accepted_data(db, model_id)
    assert [(v["jobId"], v["submitter"]) for v in audit["versions"]] == [
        (a_id, "alice"),
        (b_id, "bob"),
    ]
    assert audit["rows"] == 200
    shares = [v["sharePct"] for v in audit["versions"]]
    assert math.fsum(shares) == pytest.approx(audit["versions"][0]["poolPct"])

    # The operator's audit command prints the same.
    monkeypatch.setenv("DATABASE_URL", svc.settings.resolved_database_url)
    monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(svc.settings.data_dir))
    get_settings.cache_clear()
    try:
        assert main(["models", "accepted", str(model_id)]) == 0
    finally:
        get_settings.cache_clear()
    printed = capsys.readouterr().out
    assert a_id in printed and b_id in printed and bad_id not in printed
    assert printed.rstrip().endswith("2 accepted versions, 200 rows")


# --- §5 fair shares inside a batch -------------------------------------------------------------


def test_four_equal_pieces_in_one_batch_share_the_pool_and_split_pays_like_whole(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    """Issue 9: 26.6, 0.6, 0, 0 tokens when four equal pieces were valued one after another."""
    pieces_model = cancer_model(db, store, "breast-cancer-pieces")
    whole_model = cancer_model(db, store, "breast-cancer-whole")
    data = CANCER.iloc[169:569]
    wallets = [WALLET_A, WALLET_B, WALLET_C, "0x" + "1" * 40]
    jobs = [
        contribute(
            db,
            store,
            rows(data.iloc[i * 100 : (i + 1) * 100]),
            model_id=pieces_model,
            user=f"supplier-{i}",
            with_manifest=manifest(wallets[i]),
        )
        for i in range(4)
    ]
    run_pipeline(svc, jobs[-1][1], model_id=pieces_model)
    whole_id, whole = contribute(
        db, store, rows(data), model_id=whole_model, with_manifest=manifest()
    )
    run_pipeline(svc, whole, model_id=whole_model)

    paid = ledger(db, pieces_model)
    tokens = [paid.get(job_id, 0.0) for job_id, _ in jobs]
    mean = math.fsum(tokens) / 4
    assert all(abs(t - mean) < 0.25 * mean for t in tokens), tokens
    rows_ = [job(db, job_id) for job_id, _ in jobs]
    pool = (rows_[0].quality or {})["valuation"]["pool_pct"]
    # Shares add up to the pool; the volume factor is the batch's 400 rows for every piece.
    assert math.fsum(r.improvement_pct or 0 for r in rows_) == pytest.approx(pool)
    assert math.fsum(tokens) == pytest.approx(pool * volume_factor(400), abs=1e-5)
    # Cut into four, the dataset earns what it earns whole (±5 %).
    whole_tokens = ledger(db, whole_model)[whole_id]
    assert math.fsum(tokens) == pytest.approx(whole_tokens, rel=0.05)


def test_identical_contributions_in_a_batch_share_one_value(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = cancer_model(db, store)
    piece = rows(CANCER.iloc[169:269])
    first_id, _ = contribute(db, store, piece, model_id=model_id, with_manifest=manifest())
    other_id, _ = contribute(
        db, store, rows(CANCER.iloc[269:369]), model_id=model_id, with_manifest=manifest(WALLET_C)
    )
    copy_id, last = contribute(
        db, store, piece, model_id=model_id, user="mallory", with_manifest=manifest(WALLET_B)
    )
    run_pipeline(svc, last, model_id=model_id)

    paid = ledger(db, model_id)
    assert paid[first_id] == pytest.approx(paid[copy_id], abs=1e-6)  # no first-come bonus
    first = (job(db, first_id).quality or {})["valuation"]
    assert first["batch_rows"] == 200  # the copy's rows count once
    assert first["batch_size"] == 3
    assert paid[first_id] + paid[copy_id] < paid[other_id] * 1.5


# --- caps and all-or-nothing payment -----------------------------------------------------------


def test_tokens_are_capped_per_contribution_and_per_model_and_day(
    make_settings: Any, db: Database, store: LocalObjectStore
) -> None:
    svc = Services(
        make_settings(
            **FAST,
            reward_max_tokens_per_contribution=5,
            reward_max_tokens_per_model_per_day=8,
        ),
        db=db,
        store=store,
    )
    add_benchmark(db, store)
    first_id, first = contribute(db, store, churn_rows(200, seed=2), with_manifest=manifest())
    run_pipeline(svc, first)
    row = job(db, first_id)
    assert row.tokens == 5.0
    assert "capped at 5 tokens per contribution" in (row.reason or "")
    assert (row.quality or {})["reward"]["total_tokens"] > 5

    # On another model the day starts from 0: a batch of two, each capped at 5, would take
    # it past 8 tokens, so both are scaled down pro rata.
    model_id = cancer_model(db, store)
    a_id, _ = contribute(
        db, store, rows(CANCER.iloc[169:269]), model_id=model_id, with_manifest=manifest(WALLET_B)
    )
    b_id, last = contribute(
        db, store, rows(CANCER.iloc[269:369]), model_id=model_id, with_manifest=manifest(WALLET_C)
    )
    run_pipeline(svc, last, model_id=model_id)
    paid = ledger(db, model_id)
    assert math.fsum(paid.values()) == pytest.approx(8.0, abs=2e-6)
    for job_id in (a_id, b_id):
        row = job(db, job_id)
        assert "scaled to 80.0% by the cap of 8 tokens per model per day" in (row.reason or "")
        assert paid[job_id] == pytest.approx(4.0, abs=1e-6)
    assert ledger(db, 1) == {first_id: 5.0}


def test_the_daily_cap_counts_the_days_exact_units(
    make_settings: Any, db: Database, store: LocalObjectStore
) -> None:
    """The day's payments are read as exact base units, not summed floats rounded to the
    nearest millionth: a day 0.6 millionth short of the cap has no whole millionth left."""
    svc = Services(make_settings(**FAST, reward_max_tokens_per_model_per_day=8), db=db, store=store)
    spec_id, _ = add_benchmark(db, store)
    cap_units = 8 * UNITS_PER_TOKEN
    earlier = cap_units - 6 * 10**11
    with db.session() as session:
        evaluation = Evaluation(
            model_id=1,
            benchmark_spec_id=spec_id,
            trigger="manual",
            metric_name="accuracy",
            metric_direction="higher_is_better",
            score=0.9,
        )
        session.add(evaluation)
        session.flush()
        session.add(
            RewardEntry(
                evaluation_id=evaluation.id,
                model_id=1,
                wallet_address=WALLET_B,
                tokens=tokens_from_units(earlier),
                units=earlier,
            )
        )
    _, version = contribute(db, store, churn_rows(200, seed=2), with_manifest=manifest())
    run_pipeline(svc, version)
    with db.session() as session:
        day = sum(session.scalars(select(RewardEntry.units).where(RewardEntry.model_id == 1)))
    assert earlier <= day <= cap_units


def two_accepted(
    svc: Services, db: Database, store: LocalObjectStore, seeds: tuple[int, int]
) -> tuple[list[str], list[EvaluationOutcome]]:
    """Two contributions (wallets A and B) valued together and both accepted, not yet paid."""
    add_benchmark(db, store)
    ids = [
        contribute(db, store, churn_rows(200, seed=s), with_manifest=manifest(w))
        for s, w in zip(seeds, (WALLET_A, WALLET_B), strict=True)
    ]
    batch = claim_batch(svc, 1, ids[-1][1], trigger="arrival")
    describe_batch(svc, batch)
    run_quality_checks(svc, batch)
    run_pii_scans(svc, batch)
    outcomes = evaluate_batch(svc, batch)
    accepted = [job_id for job_id, _ in ids if job(db, job_id).status == EVALUATING]
    assert len(accepted) == 2
    return accepted, outcomes


def test_a_batch_is_paid_all_or_nothing(
    svc: Services, db: Database, store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipeline.rewards.payouts as payouts

    accepted, outcomes = two_accepted(svc, db, store, seeds=(11, 12))

    write = payouts._write_payment
    calls = []

    def failing(session: Any, member: Any) -> None:
        calls.append(member)
        if len(calls) == 2:
            raise RuntimeError("the database went away")
        write(session, member)

    monkeypatch.setattr(payouts, "_write_payment", failing)
    with pytest.raises(RuntimeError):
        pay_batch(svc, 1, outcomes)
    assert ledger(db) == {}
    assert {job(db, j).status for j in accepted} == {EVALUATING}

    monkeypatch.setattr(payouts, "_write_payment", write)
    pay_batch(svc, 1, outcomes)
    pay_batch(svc, 1, outcomes)  # again: nothing more
    assert {job(db, j).status for j in accepted} == {REWARDED}
    assert set(ledger(db)) == set(accepted)
    with db.session() as session:
        assert len(session.scalars(select(RewardEntry)).all()) == 2


def test_two_concurrent_payers_of_one_valuation_pay_once(
    svc: Services,
    db: Database,
    store: LocalObjectStore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two runs (two processes' worth of engines) pay the same valuation at the same moment:
    both read it unpaid, then both write; the ledger gets each payment once (issue 19)."""
    import threading

    import pipeline.rewards.payouts as payouts

    accepted, outcomes = two_accepted(svc, db, store, seeds=(21, 22))

    read_members = payouts._valuation_members
    both_read = threading.Barrier(2, timeout=60)
    first_read = threading.local()

    def read_then_wait(*args: Any, **kwargs: Any) -> Any:
        found = read_members(*args, **kwargs)
        if not getattr(first_read, "done", False):
            first_read.done = True
            both_read.wait()  # neither writes before both have seen the valuation unpaid
        return found

    monkeypatch.setattr(payouts, "_valuation_members", read_then_wait)
    caplog.set_level("INFO", logger="pipeline.rewards.payouts")

    def pay() -> Any:
        own = Services(svc.settings, store=store)  # its own engine and pool, as another process
        try:
            return pay_batch(own, 1, outcomes)
        finally:
            own.close()

    results, errors = run_together(pay, 2)
    assert errors == [] and len(results) == 2
    # The loser of the race wrote, hit the ledger's unique rows or the job's status, and
    # rolled back.
    assert "was paid concurrently" in caplog.text
    with db.session() as session:
        entries = session.scalars(select(RewardEntry)).all()
    paid_ids = [e.contribution_id for e in entries if e.contribution_id is not None]
    assert len(paid_ids) == len(entries)  # every entry pays a contribution
    assert sorted(paid_ids) == sorted(accepted)
    assert {job(db, j).status for j in accepted} == {REWARDED}
    paid = {o.evaluation_id: o.tokens for o in results[0]}
    assert paid == {o.evaluation_id: o.tokens for o in results[1]}
    assert math.isclose(sum(e.tokens for e in entries), sum(paid.values()))


def test_a_batch_whose_job_left_evaluating_is_not_recorded_at_all(
    svc: Services, db: Database, store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipeline.rewards.batch_valuation as valuation
    from pipeline.rewards.valuation import value_batch

    add_benchmark(db, store)
    (a_id, _), (b_id, last) = (
        contribute(db, store, churn_rows(200, seed=s), with_manifest=manifest()) for s in (2, 3)
    )

    def lease_lost_meanwhile(*args: Any, **kwargs: Any) -> Any:
        result = value_batch(*args, **kwargs)
        with db.session() as session:  # another run took the job over (an expired claim)
            row = session.get(Contribution, b_id)
            assert row is not None
            row.status = "validating"
        return result

    monkeypatch.setattr(valuation, "value_batch", lease_lost_meanwhile)
    result = run_pipeline(svc, last)
    with db.session() as session:
        assert (
            session.scalars(select(Evaluation).where(Evaluation.valuation_id.is_not(None))).all()
            == []
        )
    assert ledger(db) == {}
    row = job(db, a_id)
    assert row.status == "queued" and "valuation not recorded" in (row.reason or "")
    assert {o.status for o in result.evaluations if o.kind == "contribution"} == {"queued"}


def test_a_contribution_the_metric_refuses_is_rejected_alone(
    svc: Services, db: Database, store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipeline.rewards.batch_valuation as scoring

    add_benchmark(db, store)
    good_id, _ = contribute(db, store, churn_rows(200, seed=2), with_manifest=manifest())
    odd_id, last = contribute(db, store, churn_rows(200, seed=3), with_manifest=manifest())
    prepare = scoring.valuation_frame

    def text_labels_for_one(svc: Services, item: Any, frame: Any) -> Any:
        frame = prepare(svc, item, frame)
        if item.contribution_id == odd_id:  # labels "0"/"1" where the benchmark has 0/1
            frame = frame.assign(churned=frame.churned.astype(str))
        return frame

    monkeypatch.setattr(scoring, "valuation_frame", text_labels_for_one)
    run_pipeline(svc, last)
    odd = job(db, odd_id)
    assert odd.status == REJECTED
    assert (odd.reason or "").startswith("evaluation refused the data: ")
    good = job(db, good_id)
    assert good.status == REWARDED, good.reason
    assert (good.quality or {})["valuation"]["batch_size"] == 1


# --- what the supplier sees --------------------------------------------------------------------


def test_job_view_and_ledger_show_pool_share_interval_and_integrity_counts(
    client: Any,
    auth_headers: Any,
    make_settings: Any,
    db: Database,
    store: LocalObjectStore,
) -> None:
    svc = Services(make_settings(**FAST), db=db, store=store)
    add_benchmark(db, store)
    job_id, version = contribute(db, store, churn_rows(200, seed=2), with_manifest=manifest())
    batch = claim_batch(svc, 1, version, trigger="arrival")
    describe_batch(svc, batch)
    run_quality_checks(svc, batch)
    run_pii_scans(svc, batch)
    outcomes = evaluate_batch(svc, batch)
    # The integrity check's counts, as it records them in the job's quality JSON.
    integrity = {
        "verdict": "passed",
        "benchmark_copies": 0,
        "known_rows": 50,
        "novel_rows": 150,
        "novel_share": 0.75,
    }
    with db.session() as session:
        row = session.get(Contribution, job_id)
        assert row is not None
        row.quality = {**(row.quality or {}), "integrity": integrity}
    [reward] = pay_batch(svc, 1, outcomes)

    view = client.get(f"/api/models/1/contributions/{job_id}", headers=auth_headers()).json()
    valuation = view["valuation"]
    assert view["status"] == "rewarded" and valuation["accepted"] is True
    assert valuation["poolPct"] == pytest.approx(view["improvementPct"])
    assert valuation["sharePct"] == pytest.approx(view["improvementPct"])
    assert valuation["interval"]["low"] > 0 and valuation["interval"]["level"] == 0.95
    assert valuation["interval"]["low"] < valuation["poolPct"] < valuation["interval"]["high"]
    assert valuation["batchSize"] == 1 and valuation["method"] == "exact"
    # The submitter sees the novelty figures, never the benchmark's (docs/integrity.md).
    told = {"verdict": "passed", "known_rows": 50, "novel_rows": 150, "novel_share": 0.75}
    assert valuation["integrity"] == told
    # Uniqueness against the accepted data: the integrity check's novel share.
    assert view["quality"]["reward"]["uniqueness_factor"] == 0.75
    assert reward.integrity == integrity and reward.share_pct == pytest.approx(
        view["improvementPct"]
    )

    entries = client.get("/api/rewards", params={"wallet": WALLET_A}).json()["entries"]
    [entry] = entries
    assert entry["sharePct"] == pytest.approx(valuation["sharePct"])
    assert entry["poolPct"] == pytest.approx(valuation["poolPct"])
    assert entry["interval"]["low"] == pytest.approx(valuation["interval"]["low"])
    assert entry["batchSize"] == 1 and entry["integrity"] == told
    history = client.get("/api/models/1/evaluations").json()["evaluations"]
    contribution = next(e for e in history if e["kind"] == "contribution")
    assert contribution["poolPct"] == pytest.approx(valuation["poolPct"])
    assert contribution["valuationMethod"] == "exact"
