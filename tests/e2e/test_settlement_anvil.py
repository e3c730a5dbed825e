"""Settlement end to end on anvil: deploy, `marketplace settle`, the API, `marketplace claim`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from web3.types import Wei

from cli.main import main
from pipeline.core.config import Settings, get_settings, load_settings
from pipeline.core.db import Database
from pipeline.settlement.chain import Chain, RewardContracts
from pipeline.store.objectstore import LocalObjectStore
from tests.support.anvil import settlement_settings
from tests.support.ledger import LedgerWriter
from tests.support.live_server import serve

# It starts anvil and an API server.
pytestmark = pytest.mark.slow
TOKEN = 10**18


@pytest.fixture
def settlement_env(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, anvil: str, deployed: RewardContracts
) -> Settings:
    values = {
        "DATABASE_URL": settings.resolved_database_url,
        "MARKETPLACE_DATA_DIR": str(settings.data_dir),
        **{k.upper(): str(v) for k, v in settlement_settings(anvil, deployed).items()},
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return load_settings(jwt_secret=settings.jwt_secret, admin_token=settings.admin_token)


def run(*args: str) -> int:
    """`marketplace ARGS` in this process, reading the environment afresh."""
    get_settings.cache_clear()
    return main(list(args))


def test_settle_then_claim_from_the_command_line_pays_the_wallet(
    settlement_env: Settings,
    db: Database,
    store: LocalObjectStore,
    deployed: RewardContracts,
    anvil: str,
    tmp_path: Path,
    capsys: Any,
) -> None:
    wallet = Account.create().address
    LedgerWriter(db, store).pay([(wallet, 12 * TOKEN + 5), (Account.create().address, TOKEN)])

    assert run("settle", "--epoch", "2026-12-07") == 0
    out = capsys.readouterr().out
    assert "epoch 2026-12-07: settled" in out and "2 wallets" in out

    # A sponsor sends the claim for the wallet (and pays its gas).
    sponsor = Account.create()
    w3 = Chain.over_http(anvil).w3
    faucet = list(w3.eth.accounts)[1]
    w3.eth.send_transaction({"from": faucet, "to": sponsor.address, "value": Wei(TOKEN)})
    key_file = tmp_path / "sponsor.key"
    key_file.write_text("0x" + bytes(sponsor.key).hex() + "\n")
    with serve(settlement_env) as (url, _):
        assert run("claim", "--url", url, "--wallet", wallet, "--key-file", str(key_file)) == 0
        out = capsys.readouterr().out
        assert f"claimed {12 * TOKEN + 5} units for {wallet}" in out
        # A second claim: nothing left, the API says so and the command fails visibly.
        assert run("claim", "--url", url, "--wallet", wallet, "--key-file", str(key_file)) == 1
        assert "nothing to claim" in capsys.readouterr().err

    token = Chain.over_http(anvil).token(deployed.token)
    assert token.functions.balanceOf(wallet).call() == 12 * TOKEN + 5


def test_settle_with_the_chain_down_fails_visibly_and_resumes(
    settlement_env: Settings,
    db: Database,
    store: LocalObjectStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    LedgerWriter(db, store).pay([(Account.create().address, TOKEN)])
    monkeypatch.setenv("SETTLEMENT_RPC_URL", "http://127.0.0.1:9")

    assert run("settle", "--epoch", "2026-12-07") == 1
    assert "not settled" in capsys.readouterr().err

    monkeypatch.setenv("SETTLEMENT_RPC_URL", settlement_env.settlement_rpc_url or "")
    assert run("settle", "--epoch", "2026-12-07") == 0
    assert "settled" in capsys.readouterr().out
