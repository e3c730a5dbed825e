"""The Python StandardMerkleTree gives what @openzeppelin/merkle-tree 1.0.8 gives."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from pipeline.rewards.formula import to_checksum_address
from pipeline.settlement.merkle import StandardMerkleTree, leaf_hash, load, verify
from tests.support.contracts import CONTRACTS_DIR, require_node_modules


def _values(count: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [
        (to_checksum_address("0x" + rng.randbytes(20).hex()), rng.choice([1, 10**18, 2**200]) + i)
        for i in range(count)
    ]


def _reference(values: list[tuple[str, int]]) -> dict[str, object]:
    node = require_node_modules()
    result = subprocess.run(
        [node, str(CONTRACTS_DIR / "merkle-tree.js")],
        input=json.dumps([[account, str(amount)] for account, amount in values]),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    reference: dict[str, object] = json.loads(result.stdout)
    return reference


@pytest.mark.parametrize("count", [1, 2, 3, 7, 64, 1000])
def test_root_proofs_and_dump_equal_the_javascript_library(count: int) -> None:
    values = _values(count, seed=count)
    # A wallet twice (two leaves of one hash would tie): the sort must keep their order.
    if count >= 3:
        values[2] = values[0]
    tree = StandardMerkleTree.of(values)

    reference = _reference(values)

    assert tree.root == reference["root"]
    assert [tree.proof(i) for i in range(count)] == reference["proofs"]
    assert tree.dump() == reference["dump"]
    assert json.loads(tree.dump_json()) == reference["dump"]
    assert tree.dump_json() == json.dumps(tree.dump(), separators=(",", ":")).encode()


def test_every_proof_verifies_and_a_changed_amount_does_not() -> None:
    values = _values(33, seed=5)
    tree = StandardMerkleTree.of(values)
    for i, (account, amount) in enumerate(values):
        assert verify(tree.root, account, amount, tree.proof(i))
    account, amount = values[4]
    assert not verify(tree.root, account, amount + 1, tree.proof(4))
    assert not verify(tree.root, values[5][0], amount, tree.proof(4))


def test_a_dump_loads_back_and_a_tampered_one_is_refused() -> None:
    tree = StandardMerkleTree.of(_values(9, seed=2))
    dump = json.loads(json.dumps(tree.dump()))
    assert load(dump).root == tree.root
    dump["values"][0]["value"][1] = str(int(dump["values"][0]["value"][1]) + 1)
    with pytest.raises(ValueError, match="does not match"):
        load(dump)


def test_amounts_outside_uint256_are_refused() -> None:
    with pytest.raises(ValueError, match="not a uint256"):
        leaf_hash("0x" + "11" * 20, 2**256)
    with pytest.raises(ValueError, match="at least one value"):
        StandardMerkleTree.of([])
