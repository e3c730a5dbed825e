"""Settlement subcommands (docs/settlement.md): `settle` runs an epoch, `claim` claims a wallet's
tokens from a local key."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cli.connection import connection_options, handles_errors, make_client
from pipeline.core.config import ConfigError, get_settings
from pipeline.core.tables import utcnow

Subparsers = argparse._SubParsersAction  # type: ignore[type-arg]


def register(sub: Subparsers) -> None:
    settle = sub.add_parser("settle", help="settle an epoch on chain (operator; SETTLEMENT_*)")
    settle.add_argument(
        "--epoch", help="the epoch's key, its Monday (YYYY-MM-DD); default: the current week"
    )
    settle.set_defaults(handler=cmd_settle)
    claim = sub.add_parser(
        "claim",
        parents=[connection_options()],
        help="claim a wallet's settled tokens, signing with a local key",
    )
    claim.add_argument("--wallet", required=True, help="the wallet (0x…, EIP-55)")
    claim.add_argument(
        "--key-file", required=True, type=Path, help="a file holding the sender's private key"
    )
    claim.add_argument("--rpc-url", help="the chain's JSON-RPC URL; default: the one the API gives")
    claim.set_defaults(handler=handles_errors(cmd_claim))


def cmd_settle(args: argparse.Namespace) -> int:
    from cli.dev_chain import dev_chain_settings
    from pipeline.services import Services
    from pipeline.settlement.chain import ChainError
    from pipeline.settlement.epoch_keys import epoch_end, epoch_of
    from pipeline.settlement.epochs import settle_epoch
    from pipeline.settlement.target import settlement_target

    # Unconfigured here: the local chain of a `marketplace dev` on this data folder, if any.
    settings = dev_chain_settings(get_settings())
    epoch = args.epoch or epoch_of(utcnow())
    end = epoch_end(epoch)
    try:
        target = settlement_target(settings)
        with Services(settings) as services:
            view = settle_epoch(services.db, services.store, target, epoch, before=end)
    except ChainError as exc:
        print(f"marketplace: epoch {epoch} not settled: {exc}; run it again", file=sys.stderr)
        return 1
    if view is None:
        print(f"epoch {epoch}: nothing to settle (no ledger row since the last epoch)")
        return 0
    print(settlement_line(view))
    return 0


def settlement_line(view: dict[str, Any]) -> str:
    return (
        f"epoch {view['epoch']}: {view['status']} · root {view['root']} · {view['wallets']} "
        f"wallets · total {view['totalAmount']} units · minted {view['mintedAmount']} · "
        f"root tx {view['rootTransaction']} (block {view['block']})"
    )


def cmd_claim(args: argparse.Namespace) -> int:
    from eth_account import Account

    from pipeline.settlement.chain import Chain, ChainError

    try:
        key = args.key_file.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read --key-file: {exc.strerror}") from None
    try:
        sender = Account.from_key(key)
    except (ValueError, TypeError):
        raise ConfigError(f"{args.key_file} does not hold a private key") from None
    with make_client(args) as client:
        claim = client.request("GET", f"/api/claims/{args.wallet}").json()
    rpc_url = args.rpc_url or claim["rpcUrl"]
    if not rpc_url:
        raise ConfigError("the API gives no RPC URL: pass --rpc-url")
    chain = Chain.over_http(rpc_url)
    try:
        if chain.chain_id != claim["chainId"]:
            raise ConfigError(f"{rpc_url} is chain {chain.chain_id}, not {claim['chainId']}")
        distributor = chain.distributor(claim["distributor"])
        proof = [bytes.fromhex(p[2:]) for p in claim["proof"]]
        call = distributor.functions.claim(claim["wallet"], int(claim["amount"]), proof)
        receipt = chain.transact(sender, call)
    except ChainError as exc:
        print(f"marketplace: the claim was not made: {exc}", file=sys.stderr)
        return 1
    claimed = int(claim["amount"]) - int(claim["claimedAmount"] or 0)
    print(
        f"claimed {claimed} units for {claim['wallet']} (epoch {claim['epoch']}): "
        f"tx {receipt.tx_hash} in block {receipt.block}, gas {receipt.gas_used}"
    )
    print(f"sent from {sender.address}", file=sys.stderr)
    return 0
