"""The `settlement` asset (weekly epochs), its reconciliation check and its schedule."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pytest
from eth_account import Account

from assets.resources import resource_defs
from assets.settlement import (
    SETTLEMENT_ASSET_JOB,
    make_settlement_schedule,
    settlement,
    settlement_reconciles,
)
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import utcnow
from pipeline.settlement.epoch_keys import epoch_of
from pipeline.store.objectstore import LocalObjectStore
from tests.support.anvil import anvil_or_skip, deploy, settlement_settings
from tests.support.ledger import LedgerWriter

# It starts anvil.
pytestmark = pytest.mark.slow
TOKEN = 10**18
# The week in progress: ledger rows written now belong to it.
EPOCH = epoch_of(utcnow())


@pytest.fixture(scope="module")
def anvil() -> Iterator[str]:
    with anvil_or_skip() as url:
        yield url


def _materialize(settings: Settings, instance: Any, epoch: str) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [settlement, settlement_reconciles],
        partition_key=epoch,
        resources=resource_defs(settings),
        instance=instance,
        raise_on_error=False,
    )


def test_an_epoch_materializes_once_with_its_metadata_and_reconciles(
    make_settings: Any,
    db: Database,
    store: LocalObjectStore,
    instance: Any,
    anvil: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    contracts = deploy(anvil)
    pinned = settlement_settings(anvil, contracts)
    # A secret is never pinned on a resource: the run reads it from the environment.
    monkeypatch.setenv("SETTLEMENT_OWNER_KEY", pinned.pop("settlement_owner_key"))
    settings = make_settings(**pinned)
    LedgerWriter(db, store).pay([(Account.create().address, 2 * TOKEN)])

    first = _materialize(settings, instance, EPOCH)
    again = _materialize(settings, instance, EPOCH)

    assert first.success and again.success
    metadata = first.asset_materializations_for_node("settlement")[0].metadata
    assert metadata["wallets"].value == 1
    assert metadata["total (base units)"].value == str(2 * TOKEN)
    assert metadata["chain id"].value == 31337
    assert metadata["contract"].value == contracts.distributor
    assert str(metadata["transaction"].value).startswith("0x")
    assert metadata["root"].value == (
        again.asset_materializations_for_node("settlement")[0].metadata["root"].value
    )
    checks = first.get_asset_check_evaluations()
    assert [c.passed for c in checks] == [True]
    assert checks[0].metadata["minted (base units)"].value == str(2 * TOKEN)


def test_with_settlement_off_the_run_fails_saying_how_to_turn_it_on(
    settings: Settings, instance: Any
) -> None:
    result = _materialize(settings, instance, EPOCH)

    assert not result.success
    failure = result.failure_data_for_node("settlement")
    assert failure is not None and "SETTLEMENT_RPC_URL" in str(failure.error)


def test_the_schedule_asks_for_the_epoch_that_just_ended_and_skips_while_off(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = make_settlement_schedule(settings)
    repository = dg.Definitions(
        assets=[settlement],
        jobs=[SETTLEMENT_ASSET_JOB],
        schedules=[schedule],
        resources=resource_defs(settings),
    ).get_repository_def()
    monday = datetime(2026, 12, 14, tzinfo=UTC)
    monkeypatch.delenv("SETTLEMENT_RPC_URL", raising=False)
    with dg.build_schedule_context(
        scheduled_execution_time=monday, repository_def=repository
    ) as context:
        skipped = schedule.evaluate_tick(context)
    assert skipped.skip_message is not None and "settlement is off" in skipped.skip_message

    monkeypatch.setenv("SETTLEMENT_RPC_URL", "http://127.0.0.1:8545")
    with dg.build_schedule_context(
        scheduled_execution_time=monday, repository_def=repository
    ) as context:
        requests = schedule.evaluate_tick(context).run_requests
    assert requests is not None
    assert [(r.partition_key, r.run_key) for r in requests] == [
        ("2026-12-07", "settlement-2026-12-07")
    ]
    assert schedule.cron_schedule == "0 0 * * 1"
