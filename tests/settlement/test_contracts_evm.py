"""The reward token and the cumulative Merkle distributor on a real EVM (py-evm)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipeline.settlement.chain import ChainError
from pipeline.settlement.merkle import StandardMerkleTree
from tests.support.evm import Evm

TOKEN = 10**18


def _publish(e: Evm, epoch: int, values: Sequence[tuple[str, int]]) -> StandardMerkleTree:
    tree = StandardMerkleTree.of(values)
    total = max(sum(v for _, v in values), 0)
    token = e.chain.token(e.contracts.token)
    distributor = e.chain.distributor(e.contracts.distributor)
    minted = token.functions.totalSupply().call()
    if total > minted:
        e.chain.transact(e.owner, token.functions.mint(e.contracts.distributor, total - minted))
    e.chain.transact(e.owner, distributor.functions.setRoot(epoch, bytes.fromhex(tree.root[2:])))
    return tree


def _claim(e: Evm, sender: object, account: str, amount: int, proof: list[str]) -> object:
    distributor = e.chain.distributor(e.contracts.distributor)
    return e.chain.transact(
        sender,  # type: ignore[arg-type]
        distributor.functions.claim(account, amount, [bytes.fromhex(p[2:]) for p in proof]),
    )


def test_the_token_has_18_decimals_and_only_its_owner_mints(evm: Evm) -> None:
    token = evm.chain.token(evm.contracts.token)
    assert token.functions.decimals().call() == 18
    assert token.functions.owner().call() == evm.owner.address
    stranger = evm.funded_account()
    with pytest.raises(ChainError, match="OwnableUnauthorizedAccount"):
        evm.chain.transact(stranger, token.functions.mint(stranger.address, 1))


def test_anyone_may_send_a_claim_and_the_account_gets_cumulative_less_claimed(evm: Evm) -> None:
    alice, bob, sponsor = evm.funded_account(), evm.funded_account(), evm.funded_account()
    token = evm.chain.token(evm.contracts.token)
    distributor = evm.chain.distributor(evm.contracts.distributor)
    first = [(alice.address, 3 * TOKEN + 1), (bob.address, 2**70)]
    tree = _publish(evm, 1, first)

    receipt = _claim(evm, sponsor, alice.address, first[0][1], tree.proof(0))

    assert token.functions.balanceOf(alice.address).call() == 3 * TOKEN + 1
    assert token.functions.balanceOf(sponsor.address).call() == 0
    assert receipt.gas_used < 100_000  # type: ignore[attr-defined]
    # The next epoch's cumulative amount pays only what was added since.
    second = [(alice.address, 5 * TOKEN + 1), (bob.address, 2**70)]
    tree = _publish(evm, 2, second)
    _claim(evm, alice, alice.address, second[0][1], tree.proof(0))
    assert token.functions.balanceOf(alice.address).call() == 5 * TOKEN + 1
    assert distributor.functions.claimed(alice.address).call() == 5 * TOKEN + 1
    claimed = distributor.events.Claimed().get_logs(from_block=0)
    assert [(log.args.account, log.args.amount) for log in claimed] == [
        (alice.address, 3 * TOKEN + 1),
        (alice.address, 2 * TOKEN),
    ]


def test_a_wrong_proof_a_stale_root_and_a_second_claim_are_refused(evm: Evm) -> None:
    alice, bob = evm.funded_account(), evm.funded_account()
    values = [(alice.address, 7 * TOKEN), (bob.address, TOKEN)]
    old = _publish(evm, 1, values)
    with pytest.raises(ChainError, match="InvalidProof"):
        _claim(evm, alice, alice.address, 8 * TOKEN, old.proof(0))  # not its amount
    with pytest.raises(ChainError, match="InvalidProof"):
        _claim(evm, alice, alice.address, 7 * TOKEN, old.proof(1))  # another leaf's proof
    new = _publish(evm, 2, [(alice.address, 9 * TOKEN), (bob.address, 2 * TOKEN)])
    with pytest.raises(ChainError, match="InvalidProof"):
        _claim(evm, bob, bob.address, TOKEN, old.proof(1))  # proof of the stale root
    _claim(evm, alice, alice.address, 9 * TOKEN, new.proof(0))
    with pytest.raises(ChainError, match="NothingToClaim"):
        _claim(evm, alice, alice.address, 9 * TOKEN, new.proof(0))


def test_roots_come_from_the_owner_only_and_each_epoch_once(evm: Evm) -> None:
    distributor = evm.chain.distributor(evm.contracts.distributor)
    stranger = evm.funded_account()
    root = bytes.fromhex("11" * 32)
    with pytest.raises(ChainError, match="OwnableUnauthorizedAccount"):
        evm.chain.transact(stranger, distributor.functions.setRoot(1, root))
    evm.chain.transact(evm.owner, distributor.functions.setRoot(1, root))
    with pytest.raises(ChainError, match="StaleEpoch"):
        evm.chain.transact(evm.owner, distributor.functions.setRoot(1, bytes.fromhex("22" * 32)))
    assert distributor.functions.merkleRoot().call() == root
    assert distributor.functions.epoch().call() == 1


def test_a_signed_transaction_sent_twice_is_one_transaction(evm: Evm) -> None:
    token = evm.chain.token(evm.contracts.token)
    signed = evm.chain.sign(evm.owner, token.functions.mint(evm.contracts.distributor, TOKEN))
    evm.chain.broadcast(signed)
    evm.chain.broadcast(signed)
    evm.chain.confirm(signed)
    evm.chain.broadcast(signed)
    assert token.functions.totalSupply().call() == TOKEN
