"""Exact reward amounts: base units of the 18-decimal token in the ledger, migration and API."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, select, text

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.migrate import downgrade, upgrade
from pipeline.core.tables import RewardEntry
from pipeline.core.token_units import tokens_from_units, units_from_tokens
from pipeline.demo.churn_data import churn_rows
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import WALLET_A, add_benchmark, contribute, manifest, run_pipeline


@pytest.mark.parametrize(
    ("tokens", "units"),
    [
        (4.96125, 4_961_250_000_000_000_000),
        (10.647829, 10_647_829_000_000_000_000),
        (0.000001, 1_000_000_000_000),
        (1e-18, 1),
        (0.30000000000000004, 300_000_000_000_000_040),  # 0.1 + 0.2, as its repr reads
        (123456789.123456, 123_456_789_123_456_000_000_000_000),
        (0.0, 0),
    ],
)
def test_a_float_amount_becomes_the_base_units_of_its_decimal_repr(
    tokens: float, units: int
) -> None:
    assert units_from_tokens(tokens) == units


@pytest.mark.parametrize("tokens", [float("nan"), float("inf"), -1.0])
def test_a_float_amount_that_is_no_amount_is_refused(tokens: float) -> None:
    with pytest.raises(ValueError, match="finite number not below 0"):
        units_from_tokens(tokens)


def test_units_read_back_as_the_nearest_float() -> None:
    assert tokens_from_units(4_961_250_000_000_000_000) == 4.96125


def test_paid_ledger_rows_carry_their_exact_amount_and_the_api_returns_it(
    client: Any, settings: Settings, db: Database, store: LocalObjectStore
) -> None:
    svc = Services(settings, db=db, store=store)
    add_benchmark(db, store)
    _, version = contribute(db, store, churn_rows(200, seed=2), with_manifest=manifest())
    run_pipeline(svc, version)
    with db.session() as session:
        entries = list(session.scalars(select(RewardEntry)))
    assert entries, "the contribution was paid"
    for entry in entries:
        assert entry.units == units_from_tokens(entry.tokens)
        assert entry.units % 10**12 == 0  # millionths of a token, exactly

    body = client.get("/api/rewards", params={"wallet": WALLET_A}).json()

    assert body["totalAmount"] == str(sum(e.units for e in entries))
    assert {e["amount"] for e in body["entries"]} == {str(e.units) for e in entries}
    assert body["totalTokens"] == pytest.approx(sum(e.tokens for e in entries))

    big = 2**200 + 12345  # more than a 64-bit column or a double holds
    with db.session() as session:
        session.get_one(RewardEntry, entries[0].id).units = big
    with db.session() as session:
        assert session.get_one(RewardEntry, entries[0].id).units == big
    body = client.get("/api/rewards", params={"wallet": WALLET_A}).json()
    assert body["totalAmount"] == str(big + sum(e.units for e in entries[1:]))


def test_migration_converts_every_ledger_row_without_loss(
    database_url: str, settings: Settings, db: Database, store: LocalObjectStore
) -> None:
    svc = Services(settings, db=db, store=store)
    add_benchmark(db, store)
    _, version = contribute(db, store, churn_rows(200, seed=2), with_manifest=manifest())
    run_pipeline(svc, version)
    db.dispose()
    amounts = [4.96125, 3.3075, 10.647829, 0.000001, 999999.999999, 0.30000000000000004]
    downgrade(database_url, "0011-1")
    engine = create_engine(database_url)
    with engine.begin() as conn:
        paid = conn.execute(text("SELECT evaluation_id, model_id FROM reward_ledger")).first()
        assert paid is not None
        conn.execute(text("DELETE FROM reward_ledger"))
        for i, tokens in enumerate(amounts):
            conn.execute(
                text(
                    "INSERT INTO reward_ledger (evaluation_id, model_id, wallet_address, tokens,"
                    " created_at) VALUES (:e, :m, :w, :t, CURRENT_TIMESTAMP)"
                ),
                {"e": paid[0], "m": paid[1], "w": f"0x{i:040x}", "t": tokens},
            )
    engine.dispose()

    upgrade(database_url)

    with db.session() as session:
        rows = session.execute(
            select(RewardEntry.tokens, RewardEntry.units).order_by(RewardEntry.id)
        ).all()
    assert [units for _, units in rows] == [units_from_tokens(t) for t in amounts]
    assert [tokens for tokens, _ in rows] == amounts  # the float column is left as it was
    assert rows[0][1] == 4_961_250_000_000_000_000
    assert rows[-1][1] == 300_000_000_000_000_040
