"""The payout lottery (issue 23): every valuation is a test in its supplier's budget of tries.

On real data (scikit-learn's breast cancer and diabetes), through the pipeline and the store:
information-free tries are never paid however often they come, the budget survives a restart,
is shared across a supplier's wallets and users, a fresh account gets no fresh budget, a paid
try earns it back, and a gain below the model's minimum meaningful improvement is not paid.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select, update

from pipeline.core.db import Database
from pipeline.core.tables import REJECTED, REWARDED, Model, ValuationTry
from pipeline.intake.contributions import contribution_view
from pipeline.rewards.budget import OWN, try_level
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.lottery import KINDS, information_free
from tests.support.pipeline import WALLET_A, WALLET_B, WALLET_C, contribute, job, manifest
from tests.support.pipeline import run_pipeline as run
from tests.support.valuation import CANCER, DIABETES, rows

from .test_payouts import FAST, cancer_model, diabetes_model

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])
WALLET_D = "0x" + "d" * 40


@pytest.fixture
def svc(make_settings: Any, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(make_settings(**FAST), db=db, store=store)


@pytest.fixture(autouse=True)
def no_label_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows tried here carry labels the label check passes; it is off to keep runs short."""
    monkeypatch.setattr("pipeline.checks.integrity.check_labels", lambda *_a, **_k: None)


def send(svc: Services, data: list[dict[str, Any]], model_id: int, **who: Any) -> Any:
    job_id, version = contribute(svc.db, svc.store, data, model_id=model_id, **who)
    run(svc, version, model_id=model_id)
    return job(svc.db, job_id)


def budget_of(row: Any) -> dict[str, Any]:
    return dict((row.quality or {}).get("budget") or {})


def noise(accepted: Any, rng: np.random.Generator, kind: str) -> list[dict[str, Any]]:
    frame = information_free(
        kind,
        accepted,
        "target",
        rng,
        100,
        task_type="classification",
        estimator="logistic_regression",
    )
    return rows(frame)


def test_try_levels_start_at_the_old_gate_and_add_up_to_the_budget() -> None:
    assert try_level(0.05, 1) == pytest.approx(0.025)  # one-sided level of the 95 % interval
    assert try_level(0.05, 2) == pytest.approx(0.05 / 6)
    total = math.fsum(try_level(0.05, n) for n in range(1, 200_000))
    assert total == pytest.approx(0.05, rel=1e-4)


@sqlite_only
def test_forty_information_free_tries_in_a_row_are_never_paid(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = cancer_model(db, store)
    accepted = CANCER.iloc[169:269].reset_index(drop=True)
    first = send(svc, rows(accepted), model_id, user="carol", with_manifest=manifest(WALLET_C))
    assert first.status == REWARDED

    rng = np.random.default_rng(23)
    wallets = [WALLET_A, WALLET_B, WALLET_D]
    valued = []
    for i in range(40):
        row = send(
            svc,
            noise(accepted, rng, KINDS[i % 3]),
            model_id,
            user="mallory",
            with_manifest=manifest(wallets[i % 3]),
        )
        assert row.status == REJECTED and not row.tokens, (i, row.reason)
        if budget_of(row):
            valued.append(budget_of(row))
    # Each try that reached the valuation spent the budget: the bar only rose.
    assert len(valued) >= 10
    numbers = [b["tryNumber"] for b in valued]
    assert numbers == list(range(1, len(valued) + 1))
    assert valued[-1]["confidencePct"] > 99.9
    assert "Your next 3 submissions to this model must" in valued[-1]["summary"]


def test_the_budget_survives_a_restart_and_is_shared_across_wallets_and_users(
    make_settings: Any, db: Database, store: LocalObjectStore
) -> None:
    svc = Services(make_settings(**FAST), db=db, store=store)
    model_id = cancer_model(db, store)
    honest = send(svc, rows(CANCER.iloc[169:269]), model_id, with_manifest=manifest(WALLET_A))
    assert honest.status == REWARDED  # alice is paid: her own stream, in full
    accepted = CANCER.iloc[169:269].reset_index(drop=True)
    rng = np.random.default_rng(5)
    tries = [
        send(svc, noise(accepted, rng, "drawn"), model_id, with_manifest=manifest(WALLET_A))
        for _ in range(2)
    ]
    assert [budget_of(t)["tryNumber"] for t in tries] == [1, 2]
    assert all(budget_of(t)["stream"] == OWN for t in tries)

    # A restart: a new process reads the tries from the database.
    settings = make_settings(**FAST)
    restarted = Services(settings, db=Database(settings.resolved_database_url), store=store)
    try:
        other_wallet = send(
            restarted, noise(accepted, rng, "drawn"), model_id, with_manifest=manifest(WALLET_B)
        )
        other_user = send(
            restarted,
            noise(accepted, rng, "drawn"),
            model_id,
            user="alice-2",
            with_manifest=manifest(WALLET_B),
        )
    finally:
        restarted.db.dispose()
    assert budget_of(other_wallet)["tryNumber"] == 3  # alice's budget, another wallet
    assert budget_of(other_user)["tryNumber"] == 4  # another user of that wallet
    assert budget_of(other_user)["stream"] == OWN
    view = contribution_view(other_user)["valuation"]["budget"]
    assert view["tryNumber"] == 4 and view["summary"] == budget_of(other_user)["summary"]
    assert "benchmark" not in view["summary"]


def test_a_fresh_account_gets_no_fresh_budget_and_a_paid_try_earns_it_back(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = cancer_model(db, store)
    # 100 rows of high texture only: a weak model (0.83 accuracy), room for a real gain.
    by_texture = CANCER.iloc[169:].sort_values("mean texture")
    accepted = by_texture.iloc[300:].reset_index(drop=True)
    seed = send(svc, rows(accepted), model_id, user="carol", with_manifest=manifest(WALLET_C))
    assert seed.status == REWARDED
    rng = np.random.default_rng(11)
    spent = [
        send(svc, noise(accepted, rng, "drawn"), model_id, user="mallory",
             with_manifest=manifest(WALLET_A))
        for _ in range(3)
    ]  # fmt: skip
    assert [budget_of(t)["tryNumber"] for t in spent] == [1, 2, 3]

    # New user, new wallet: the model's shared newcomer budget, already spent three times.
    sybil = send(svc, noise(accepted, rng, "drawn"), model_id, user="sybil-1",
                 with_manifest=manifest(WALLET_D))  # fmt: skip
    assert sybil.status == REJECTED
    assert budget_of(sybil)["tryNumber"] == 4
    assert budget_of(sybil)["level"] == pytest.approx(try_level(0.05, 4))

    # A real gain clears even the fifth newcomer try's bar, and earns the newcomer budget back.
    honest = send(svc, rows(by_texture.iloc[:300]), model_id, user="dave",
                  with_manifest=manifest(WALLET_B))  # fmt: skip
    assert honest.status == REWARDED, honest.reason
    after = send(svc, noise(accepted, rng, "drawn"), model_id, user="sybil-2",
                 with_manifest=manifest("0x" + "e" * 40))  # fmt: skip
    assert budget_of(after)["tryNumber"] == 1
    with db.session() as session:
        tries = session.scalars(
            select(ValuationTry).where(ValuationTry.model_id == model_id).order_by(ValuationTry.id)
        ).all()
    assert [t.accepted for t in tries] == [True, False, False, False, False, True, False]


def test_a_gain_below_the_models_minimum_improvement_is_not_paid(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = diabetes_model(db, store)
    with db.session() as session:
        session.execute(update(Model).where(Model.id == model_id).values(min_improvement_pct=60.0))
    row = send(svc, rows(DIABETES.iloc[192:342]), model_id, with_manifest=manifest())

    assert row.status == REJECTED and not row.tokens
    assert (row.reason or "").startswith("not paid: r2 ")
    assert "not above the model's minimum of +60.00 %" in (row.reason or "")
    budget = budget_of(row)
    assert budget["minImprovementPct"] == 60.0 and budget["next"][0]["minGainPct"] > 60.0
    assert "must show at least" in budget["summary"]


def test_rows_sent_by_two_contributions_of_a_batch_are_valued_once(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    model_id = cancer_model(db, store)
    first_rows = rows(CANCER.iloc[169:269])
    first_id, _ = contribute(db, store, first_rows, model_id=model_id, with_manifest=manifest())
    overlap = first_rows[:60] + rows(CANCER.iloc[269:309])
    second_id, last = contribute(
        db, store, overlap, model_id=model_id, user="bob", with_manifest=manifest(WALLET_B)
    )
    run(svc, last, model_id=model_id)

    second = (job(db, second_id).quality or {})["valuation"]
    assert second["valued_rows"] == 40  # its 60 rows the first contribution sent are not its own
    assert (job(db, first_id).quality or {})["valuation"]["valued_rows"] == 100
    assert second["batch_rows"] <= 140
