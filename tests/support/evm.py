"""A real EVM in process for tests: py-evm through eth-tester, with a funded owner key."""

from __future__ import annotations

from dataclasses import dataclass

from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import EthereumTesterProvider, Web3
from web3.types import Wei

from pipeline.settlement.chain import Chain, RewardContracts

ETHER = 10**18


@dataclass
class Evm:
    chain: Chain
    owner: LocalAccount
    contracts: RewardContracts

    def funded_account(self) -> LocalAccount:
        """A new key holding 10 ether (to pay for the gas of what it sends)."""
        account: LocalAccount = Account.create()
        w3 = self.chain.w3
        w3.eth.send_transaction(
            {"from": w3.eth.accounts[0], "to": account.address, "value": Wei(ETHER * 10)}
        )
        return account


def on_chain(chain: Chain, contracts: RewardContracts) -> dict[str, object]:
    """What the reward contracts hold: supply, mint and root counts, current root and epoch."""
    token = chain.token(contracts.token)
    distributor = chain.distributor(contracts.distributor)
    mints = token.events.Transfer().get_logs(from_block=0)
    return {
        "supply": token.functions.totalSupply().call(),
        "mints": len(mints),
        "roots": len(distributor.events.RootSet().get_logs(from_block=0)),
        "root": "0x" + distributor.functions.merkleRoot().call().hex(),
        "epoch": distributor.functions.epoch().call(),
    }


def new_evm() -> Evm:
    w3 = Web3(EthereumTesterProvider())
    owner: LocalAccount = Account.create()
    w3.eth.send_transaction(
        {"from": w3.eth.accounts[0], "to": owner.address, "value": Wei(ETHER * 100)}
    )
    chain = Chain(w3)
    return Evm(chain=chain, owner=owner, contracts=chain.deploy(owner))
