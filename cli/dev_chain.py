"""The local chain `marketplace dev` settles on (docs/settlement.md#the-local-chain-of-make-run).

Where SETTLEMENT_RPC_URL is unset and npm has installed anvil (`make contracts`), `marketplace
dev` starts anvil on loopback, deploys the reward contracts with anvil's well-known first
account as owner (a public key: for this local chain only, never in production), gives the demo
wallet gas for its claim, and sets the SETTLEMENT_* variables the API and the Dagster processes
read. The chain's state is kept in the data folder (anvil `--state`, written when anvil stops),
so a restart finds the contracts and the epochs settled before. The same values go to
DATA_DIR/dev-chain.json, which `marketplace settle` in a second terminal reads when its own
SETTLEMENT_RPC_URL is unset, and the next start reads to find its contracts again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cli.anvil import ANVIL_CHAIN_ID, ANVIL_OWNER_KEY, anvil_binary, free_port, wait_for_rpc
from cli.processes import SupervisedTree
from pipeline.core.config import Settings

if TYPE_CHECKING:
    from pipeline.settlement.chain import Chain, RewardContracts

DEV_CHAIN_FILE = "dev-chain.json"
STATE_FILE = "anvil-state.json"
DEMO_GAS_WEI = 10**18  # 1 ETH of the local chain: gas for the demo wallet's claims
TURN_ON = "settlement is off: install Node and npm, run `make contracts`, then `make run` again"


@dataclass
class DevChain:
    url: str
    environment: dict[str, str]  # the SETTLEMENT_* variables
    tree: SupervisedTree

    def stop(self) -> None:
        self.tree.wait(timeout=10)


def start_dev_chain(data_dir: Path, *, grace: float = 5.0) -> DevChain | None:
    """anvil with the reward contracts deployed; None where npm has not installed it, or
    (with a warning) where it does not start."""
    from eth_account import Account
    from web3.types import RPCEndpoint

    from pipeline.demo.demo_data import demo_wallet
    from pipeline.settlement.chain import Chain

    binary = anvil_binary()
    if binary is None:
        return None
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(binary), "--host", "127.0.0.1", "--port", str(port), "--silent"]
    command += ["--state", str(data_dir / STATE_FILE)]
    tree = SupervisedTree(command, env=dict(os.environ), cwd=data_dir, grace=grace)
    try:
        wait_for_rpc(url, tree.watchdog, timeout=30.0)
        chain = Chain.over_http(url)
        owner = Account.from_key(ANVIL_OWNER_KEY)
        contracts = _deployed(data_dir, chain)
        if contracts is None:
            contracts = chain.deploy(owner)
        chain.w3.provider.make_request(
            RPCEndpoint("anvil_setBalance"), [demo_wallet(), hex(DEMO_GAS_WEI)]
        )
    except Exception as exc:  # anvil died, or the deployment failed: dev runs without it
        tree.wait(timeout=10)
        print(
            f"marketplace dev: warning: the local chain did not start ({exc}); settlement is off",
            flush=True,
        )
        return None
    except BaseException:
        tree.wait(timeout=10)
        raise
    environment = {
        "SETTLEMENT_RPC_URL": url,
        "SETTLEMENT_CHAIN_ID": str(ANVIL_CHAIN_ID),
        "SETTLEMENT_TOKEN_ADDRESS": contracts.token,
        "SETTLEMENT_DISTRIBUTOR_ADDRESS": contracts.distributor,
        "SETTLEMENT_OWNER_KEY": ANVIL_OWNER_KEY,
    }
    record = data_dir / DEV_CHAIN_FILE
    record.touch(mode=0o600)
    record.write_text(json.dumps(environment, indent=2) + "\n", encoding="utf-8")
    return DevChain(url=url, environment=environment, tree=tree)


def _deployed(data_dir: Path, chain: Chain) -> RewardContracts | None:
    """The contracts of an earlier start, where the chain's saved state still has them."""
    from web3 import Web3

    from pipeline.settlement.chain import RewardContracts

    try:
        earlier = json.loads((data_dir / DEV_CHAIN_FILE).read_text(encoding="utf-8"))
        contracts = RewardContracts(
            token=earlier["SETTLEMENT_TOKEN_ADDRESS"],
            distributor=earlier["SETTLEMENT_DISTRIBUTOR_ADDRESS"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for address in (contracts.token, contracts.distributor):
        if not chain.w3.eth.get_code(Web3.to_checksum_address(address)):
            return None
    return contracts


def dev_chain_settings(settings: Settings) -> Settings:
    """`settings`, with the running `marketplace dev`'s local chain where none is configured."""
    if settings.settlement_rpc_url is not None:
        return settings
    record = settings.data_dir / DEV_CHAIN_FILE
    try:
        environment = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return settings
    from pipeline.core.config import load_settings

    return load_settings(**{name.lower(): value for name, value in environment.items()})
