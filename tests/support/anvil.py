"""anvil for tests: a fresh local chain with the reward contracts deployed, or a skip."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from eth_account import Account

from cli.anvil import ANVIL_CHAIN_ID, ANVIL_OWNER_KEY, anvil_binary, running_anvil
from pipeline.settlement.chain import Chain, RewardContracts
from tests.conftest import IN_CI


@contextmanager
def anvil_or_skip() -> Iterator[str]:
    """A running anvil's RPC URL; skip where npm has not installed it (fail in CI)."""
    binary = anvil_binary()
    if binary is None:
        message = "anvil is not installed: run `make contracts` (npm ci in contracts/)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    with running_anvil(binary) as url:
        yield url


def deploy(url: str) -> RewardContracts:
    return Chain.over_http(url).deploy(Account.from_key(ANVIL_OWNER_KEY))


def settlement_settings(url: str, contracts: RewardContracts) -> dict[str, Any]:
    """The SETTLEMENT_* settings of that chain and those contracts (lower-case field names)."""
    return {
        "settlement_rpc_url": url,
        "settlement_chain_id": ANVIL_CHAIN_ID,
        "settlement_token_address": contracts.token,
        "settlement_distributor_address": contracts.distributor,
        "settlement_owner_key": ANVIL_OWNER_KEY,
    }
