"""The local chain of `marketplace dev` (cli/dev_chain.py) on a real anvil."""

from __future__ import annotations

from pathlib import Path

import pytest
from web3 import Web3

from cli.anvil import ANVIL_CHAIN_ID, anvil_binary
from cli.dev_chain import DEMO_GAS_WEI, dev_chain_settings, start_dev_chain
from pipeline.core.config import Settings
from pipeline.demo.demo_data import demo_wallet
from pipeline.settlement.chain import Chain
from tests.conftest import IN_CI


@pytest.fixture
def anvil_installed() -> None:
    if anvil_binary() is None:
        message = "anvil is not installed: run `make contracts` (npm ci in contracts/)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.mark.usefixtures("anvil_installed")
def test_dev_chain_deploys_funds_the_demo_wallet_and_keeps_its_contracts(tmp_path: Path) -> None:
    settings = Settings(marketplace_data_dir=tmp_path)
    assert dev_chain_settings(settings).settlement_rpc_url is None  # no chain started here
    first = start_dev_chain(tmp_path, grace=3.0)
    assert first is not None
    try:
        env = first.environment
        assert env["SETTLEMENT_CHAIN_ID"] == str(ANVIL_CHAIN_ID)
        chain = Chain.over_http(env["SETTLEMENT_RPC_URL"])
        assert chain.w3.eth.get_code(
            Web3.to_checksum_address(env["SETTLEMENT_DISTRIBUTOR_ADDRESS"])
        )
        assert chain.w3.eth.get_balance(Web3.to_checksum_address(demo_wallet())) == DEMO_GAS_WEI
        # `marketplace settle` in a second terminal finds this chain through the data folder.
        found = dev_chain_settings(settings)
        assert found.settlement_rpc_url == env["SETTLEMENT_RPC_URL"]
        assert found.settlement_distributor_address == env["SETTLEMENT_DISTRIBUTOR_ADDRESS"]
        assert found.settlement_owner_key is not None
    finally:
        first.stop()
    # A restart loads the saved chain: the same contracts, not a second deployment.
    second = start_dev_chain(tmp_path, grace=3.0)
    assert second is not None
    try:
        assert second.environment["SETTLEMENT_TOKEN_ADDRESS"] == env["SETTLEMENT_TOKEN_ADDRESS"]
        owner_nonce = Chain.over_http(second.url).next_nonce(
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        )
        assert owner_nonce == 2  # the two deployments of the first start, nothing more
    finally:
        second.stop()


def test_dev_chain_is_none_without_anvil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cli.dev_chain.anvil_binary", lambda: None)
    assert start_dev_chain(tmp_path) is None


def test_a_chain_that_does_not_start_leaves_settlement_off_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("cli.dev_chain.anvil_binary", lambda: Path("/bin/false"))
    assert start_dev_chain(tmp_path, grace=1.0) is None
    out = capsys.readouterr().out
    assert "the local chain did not start (anvil exited with status 1); settlement is off" in out
    assert not (tmp_path / "dev-chain.json").exists()
