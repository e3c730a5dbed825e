"""The claims a wallet made, read from the distributor's `Claimed` events: amount, cumulative,
transaction and block. The chain is the record: a claim may be sent by anyone (a sponsor, a
wallet app, `marketplace claim`), so this service never sees most of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from web3 import Web3

from pipeline.core.config import Settings
from pipeline.settlement.chain import Chain

# (distributor, wallet) -> the wallet's claims, oldest first; None when the chain does not answer.
ClaimsReader = Callable[[str, str], list[dict[str, Any]] | None]


def read_claims(chain: Chain, distributor: str, wallet: str) -> list[dict[str, Any]]:
    """The `Claimed` events of `wallet` (an indexed topic: the node filters them)."""
    contract = chain.distributor(distributor)
    logs = contract.events.Claimed().get_logs(
        from_block=0, argument_filters={"account": Web3.to_checksum_address(wallet)}
    )
    return [
        {
            "amount": str(int(log.args["amount"])),
            "cumulative": str(int(log.args["cumulative"])),
            "transaction": "0x" + bytes(log.transactionHash).hex().removeprefix("0x"),
            "block": int(log.blockNumber),
        }
        for log in sorted(logs, key=lambda log: (log.blockNumber, log.logIndex))
    ]


def chain_claims_reader(settings: Settings) -> ClaimsReader:
    """Reads the events over SETTLEMENT_RPC_URL, with a short timeout."""

    def read(distributor: str, wallet: str) -> list[dict[str, Any]] | None:
        if settings.settlement_rpc_url is None:
            return None
        try:
            chain = Chain.over_http(settings.settlement_rpc_url, timeout_seconds=3.0)
            return read_claims(chain, distributor, wallet)
        except Exception:  # a chain that is down must not fail the page
            return None

    return read
