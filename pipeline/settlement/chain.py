"""An EVM chain over JSON-RPC (web3): deploy the reward contracts, sign, send and confirm calls.

A transaction is signed first (`sign`), so its raw bytes and hash can be stored before it is
sent; `broadcast` sends those same bytes again after a crash, which can never make a second
transaction: the nonce is spent once. Reverts raise `ChainError` naming the contract's error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import TransactionNotFound

from pipeline.settlement.contracts import DISTRIBUTOR, TOKEN, artifact, revert_reason

TOKEN_NAME = "Marketplace Reward"
TOKEN_SYMBOL = "MKTR"


class ChainError(Exception):
    """The chain refused or did not confirm a transaction (reverted, unreachable, timed out)."""


@dataclass(frozen=True)
class SignedCall:
    """A signed transaction: what is stored before it is sent."""

    tx_hash: str
    raw: str
    nonce: int


@dataclass(frozen=True)
class Receipt:
    tx_hash: str
    block: int
    gas_used: int
    contract_address: str | None


@dataclass(frozen=True)
class RewardContracts:
    token: str
    distributor: str


class Chain:
    """One chain, reached through a `Web3` (HTTP in production, eth-tester in tests)."""

    def __init__(self, w3: Web3) -> None:
        self.w3 = w3

    @classmethod
    def over_http(cls, url: str, timeout_seconds: float = 30.0) -> Chain:
        return cls(Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": timeout_seconds})))

    @property
    def chain_id(self) -> int:
        return int(self.w3.eth.chain_id)

    def token(self, address: str) -> Contract:
        return self.w3.eth.contract(address=Web3.to_checksum_address(address), abi=_abi(TOKEN))

    def distributor(self, address: str) -> Contract:
        return self.w3.eth.contract(
            address=Web3.to_checksum_address(address), abi=_abi(DISTRIBUTOR)
        )

    def next_nonce(self, account: str) -> int:
        return int(self.w3.eth.get_transaction_count(Web3.to_checksum_address(account), "pending"))

    def sign(self, account: LocalAccount, call: Any, nonce: int | None = None) -> SignedCall:
        """Sign a contract call or constructor; a call that would revert raises ChainError."""
        nonce = self.next_nonce(account.address) if nonce is None else nonce
        try:
            tx = call.build_transaction(
                {"from": account.address, "nonce": nonce, "chainId": self.chain_id}
            )
        except Exception as exc:  # the backends raise unrelated types for a revert
            raise ChainError(f"the chain refused the call: {revert_reason(exc)}") from exc
        signed = account.sign_transaction(tx)
        return SignedCall(
            tx_hash="0x" + bytes(signed.hash).hex(),
            raw="0x" + bytes(signed.raw_transaction).hex(),
            nonce=nonce,
        )

    def receipt_of(self, tx_hash: str) -> Receipt | None:
        """The receipt of a mined transaction; None while it is unknown or pending."""
        try:
            receipt = self.w3.eth.get_transaction_receipt(tx_hash)  # type: ignore[arg-type]
        except TransactionNotFound:
            return None
        if receipt["status"] != 1:
            raise ChainError(f"transaction {tx_hash} reverted in block {receipt['blockNumber']}")
        address = receipt.get("contractAddress")
        return Receipt(
            tx_hash=tx_hash,
            block=int(receipt["blockNumber"]),
            gas_used=int(receipt["gasUsed"]),
            contract_address=str(address) if address else None,
        )

    def broadcast(self, signed: SignedCall) -> None:
        """Send the signed bytes; sending them again (after a crash) is harmless."""
        if self.receipt_of(signed.tx_hash) is not None:
            return
        try:
            self.w3.eth.send_raw_transaction(signed.raw)  # type: ignore[arg-type]
        except Exception as exc:
            # Already known, or mined meanwhile (its nonce now "too low"): it is the same one.
            if self.receipt_of(signed.tx_hash) is not None or _already_known(exc):
                return
            raise ChainError(f"sending {signed.tx_hash} failed: {revert_reason(exc)}") from exc

    def confirm(self, signed: SignedCall, timeout_seconds: float = 60.0) -> Receipt:
        """Wait for the transaction's receipt (sending it again if the node lost it)."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            receipt = self.receipt_of(signed.tx_hash)
            if receipt is not None:
                return receipt
            if time.monotonic() > deadline:
                raise ChainError(f"transaction {signed.tx_hash} not mined in {timeout_seconds} s")
            self.broadcast(signed)
            time.sleep(0.05)

    def transact(self, account: LocalAccount, call: Any) -> Receipt:
        """Sign, send and confirm one call (for deployments, claims and tests)."""
        signed = self.sign(account, call)
        self.broadcast(signed)
        return self.confirm(signed)

    def deploy(self, owner: LocalAccount) -> RewardContracts:
        """The token and its distributor, both owned by `owner` (who mints and sets roots)."""
        token = self._deploy(owner, TOKEN, TOKEN_NAME, TOKEN_SYMBOL, owner.address)
        distributor = self._deploy(owner, DISTRIBUTOR, token, owner.address)
        return RewardContracts(token=token, distributor=distributor)

    def _deploy(self, owner: LocalAccount, name: str, *args: Any) -> str:
        factory = self.w3.eth.contract(abi=_abi(name), bytecode=artifact(name)["bytecode"])
        receipt = self.transact(owner, factory.constructor(*args))
        assert receipt.contract_address is not None
        return receipt.contract_address


def _abi(name: str) -> Any:
    return artifact(name)["abi"]


def _already_known(exc: Exception) -> bool:
    text = str(exc).lower()
    return "already known" in text or "already imported" in text
