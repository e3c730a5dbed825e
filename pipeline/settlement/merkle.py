"""OpenZeppelin's StandardMerkleTree over (address, uint256): the same root, proofs and dump.

A leaf is `keccak256(keccak256(abi.encode(account, amount)))`; a node hashes its two children
sorted; leaves are sorted by hash and laid out, like `@openzeppelin/merkle-tree` 1.0.8 does, at
the end of one array in reverse order (`tree[0]` is the root, the children of `i` are `2i+1` and
`2i+2`). `dump()` is that library's `standard-v1` JSON, so `StandardMerkleTree.load` in
JavaScript reads our trees and a claim never depends on this service.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sha3 import keccak_256  # safe-pysha3: C keccak, about 6 times pycryptodome's per call

LEAF_ENCODING = ("address", "uint256")
DUMP_FORMAT = "standard-v1"
_UINT256_MAX = 2**256 - 1


def keccak256(data: bytes) -> bytes:
    digest: bytes = keccak_256(data).digest()
    return digest


def leaf_hash(account: str, amount: int) -> bytes:
    """The leaf of (account, amount): abi.encode is two 32-byte words, the address left-padded."""
    if not 0 <= amount <= _UINT256_MAX:
        raise ValueError(f"amount {amount} is not a uint256")
    address = bytes.fromhex(account[2:])
    if len(address) != 20:
        raise ValueError(f"{account!r} is not a 20-byte address")
    encoded = bytes(12) + address + amount.to_bytes(32, "big")
    return keccak256(keccak256(encoded))


def node_hash(a: bytes, b: bytes) -> bytes:
    return keccak256(a + b if a <= b else b + a)


def _hex(node: bytes) -> str:
    return "0x" + node.hex()


@dataclass(frozen=True)
class StandardMerkleTree:
    """A tree of (account, cumulative amount) values, in the order they were given."""

    tree: list[bytes]
    values: list[tuple[str, int]]
    tree_indices: list[int]

    @classmethod
    def of(cls, values: Sequence[tuple[str, int]]) -> StandardMerkleTree:
        if not values:
            raise ValueError("a Merkle tree needs at least one value")
        hashes = [leaf_hash(account, amount) for account, amount in values]
        # Stable, like the JavaScript sort: equal leaves keep their order.
        order = sorted(range(len(values)), key=hashes.__getitem__)
        size = 2 * len(values) - 1
        tree: list[bytes] = [b""] * size
        tree_indices = [0] * len(values)
        for position, value_index in enumerate(order):
            tree[size - 1 - position] = hashes[value_index]
            tree_indices[value_index] = size - 1 - position
        for i in range(size - 1 - len(values), -1, -1):
            tree[i] = node_hash(tree[2 * i + 1], tree[2 * i + 2])
        return cls(tree=tree, values=list(values), tree_indices=tree_indices)

    @property
    def root(self) -> str:
        return _hex(self.tree[0])

    def proof(self, value_index: int) -> list[str]:
        """The sibling hashes from the value's leaf up to the root."""
        index = self.tree_indices[value_index]
        proof: list[str] = []
        while index > 0:
            sibling = index - 1 if index % 2 == 0 else index + 1
            proof.append(_hex(self.tree[sibling]))
            index = (index - 1) // 2
        return proof

    def dump(self) -> dict[str, Any]:
        """The `standard-v1` JSON of `@openzeppelin/merkle-tree` (amounts as decimal strings)."""
        return {
            "format": DUMP_FORMAT,
            "leafEncoding": list(LEAF_ENCODING),
            "tree": [_hex(node) for node in self.tree],
            "values": [
                {"value": [account, str(amount)], "treeIndex": index}
                for (account, amount), index in zip(self.values, self.tree_indices, strict=True)
            ],
        }

    def dump_json(self) -> bytes:
        """`dump()` as compact JSON, written directly (a 100,000-leaf tree in a fraction of the
        time `json.dumps` of the dict takes); equal to `json.dumps(dump(), separators=(",",
        ":"))`, which a test checks. Addresses and decimal amounts need no escaping."""
        nodes = ",".join(f'"0x{node.hex()}"' for node in self.tree)
        values = ",".join(
            f'{{"value":["{account}","{amount}"],"treeIndex":{index}}}'
            for (account, amount), index in zip(self.values, self.tree_indices, strict=True)
        )
        encoding = ",".join(f'"{kind}"' for kind in LEAF_ENCODING)
        return (
            f'{{"format":"{DUMP_FORMAT}","leafEncoding":[{encoding}],"tree":[{nodes}],'
            f'"values":[{values}]}}'
        ).encode()


def verify(root: str, account: str, amount: int, proof: list[str]) -> bool:
    """What `MerkleProof.verify` computes on chain."""
    node = leaf_hash(account, amount)
    for sibling in proof:
        node = node_hash(node, bytes.fromhex(sibling[2:]))
    return _hex(node) == root.lower()


def from_dump(dump: dict[str, Any], root: str) -> StandardMerkleTree:
    """A stored tree as it is, its root checked (fast: no hashing of the leaves)."""
    tree = StandardMerkleTree(
        tree=[bytes.fromhex(node[2:]) for node in dump["tree"]],
        values=[(v["value"][0], int(v["value"][1])) for v in dump["values"]],
        tree_indices=[int(v["treeIndex"]) for v in dump["values"]],
    )
    if tree.root != root:
        raise ValueError(f"the stored tree's root is {tree.root}, not {root}")
    return tree


def load(dump: dict[str, Any]) -> StandardMerkleTree:
    """A tree from its dump, rebuilt from the values and checked against the stored nodes."""
    if dump.get("format") != DUMP_FORMAT or dump.get("leafEncoding") != list(LEAF_ENCODING):
        raise ValueError("not a standard-v1 (address, uint256) tree dump")
    values = [(v["value"][0], int(v["value"][1])) for v in dump["values"]]
    tree = StandardMerkleTree.of(values)
    if tree.dump() != dump:
        raise ValueError("the tree dump does not match its values")
    return tree
