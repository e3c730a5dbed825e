"""Benchmark: one epoch of 100,000 wallets settled on anvil, against building its tree alone.

    python bench/settlement.py                 # temp SQLite store, its own anvil
    python bench/settlement.py --wallets 10000 --claims 20

Needs anvil from npm (`make contracts`, or `npm ci` in contracts/). Steps:
  ledger:   one reward_ledger row per wallet (bulk insert, not timed)
  baseline: the snapshot read and the Merkle tree built, in process (`tree_build_seconds`)
  epoch:    `settle_epoch` whole: snapshot, tree, tree stored, mint, root (`epoch_seconds`);
            `tree_build_and_store_seconds` is the snapshot, tree and store alone
  claims:   `--claims` claims sent one after another by a sponsor; gas of each
Prints `figure: value` lines, `ratio: X` last (epoch time / tree build). Goals: tree built and
stored in <= 3 s, claim gas <= 100,000, ratio <= 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from eth_account import Account  # noqa: E402
from sqlalchemy import create_engine, insert  # noqa: E402

from cli.anvil import ANVIL_OWNER_KEY, anvil_binary, running_anvil  # noqa: E402
from pipeline.core.db import Database  # noqa: E402
from pipeline.core.migrate import upgrade  # noqa: E402
from pipeline.core.tables import RewardEntry  # noqa: E402
from pipeline.settlement.chain import Chain  # noqa: E402
from pipeline.settlement.epochs import SettlementTarget, settle_epoch  # noqa: E402
from pipeline.settlement.snapshot import store_tree, take_snapshot  # noqa: E402
from pipeline.store.objectstore import LocalObjectStore  # noqa: E402

TOKEN = 10**18


def fill_ledger(url: str, wallets: int) -> list[tuple[str, int]]:
    """One ledger row per wallet; foreign keys off (a plain connection): only amounts matter."""
    amounts = [
        ("0x" + (i + 1).to_bytes(20, "big").hex(), TOKEN * (i % 97 + 1) + i) for i in range(wallets)
    ]
    from pipeline.rewards.formula import to_checksum_address

    amounts = [(to_checksum_address(w), units) for w, units in amounts]
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            insert(RewardEntry),
            [
                {
                    "evaluation_id": "bench",
                    "model_id": 1,
                    "wallet_address": wallet,
                    "tokens": units / TOKEN,
                    "units": units,
                }
                for wallet, units in amounts
            ],
        )
    engine.dispose()
    return amounts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wallets", type=int, default=100_000)
    parser.add_argument("--claims", type=int, default=100)
    args = parser.parse_args()
    binary = anvil_binary()
    if binary is None:
        print(
            "anvil is not installed: run `make contracts` (npm ci in contracts/)", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory() as tmp, running_anvil(binary) as rpc:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        upgrade(url)
        amounts = fill_ledger(url, args.wallets)
        db = Database(url)
        store = LocalObjectStore(Path(tmp) / "objects")

        started = time.perf_counter()
        snapshot = take_snapshot(db, ledger_row_id=len(amounts))
        tree = snapshot.tree()
        tree_build = time.perf_counter() - started
        started = time.perf_counter()
        snapshot = take_snapshot(db, ledger_row_id=len(amounts))
        key = store_tree(store, "baseline", snapshot.tree())
        build_and_store = time.perf_counter() - started
        tree_bytes = (Path(tmp) / "objects" / key).stat().st_size

        owner = Account.from_key(ANVIL_OWNER_KEY)
        chain = Chain.over_http(rpc)
        contracts = chain.deploy(owner)
        target = SettlementTarget(chain=chain, owner=owner, contracts=contracts)
        started = time.perf_counter()
        view = settle_epoch(db, store, target, "2026-12-07")
        epoch = time.perf_counter() - started
        assert view is not None and view["root"] == tree.root

        distributor = chain.distributor(contracts.distributor)
        gas: list[int] = []
        started = time.perf_counter()
        for index in range(min(args.claims, len(amounts))):
            account, cumulative = tree.values[index]
            proof = [bytes.fromhex(p[2:]) for p in tree.proof(index)]
            call = distributor.functions.claim(account, cumulative, proof)
            gas.append(chain.transact(owner, call).gas_used)
        claims = time.perf_counter() - started
        db.dispose()

    # The deepest leaf is the last node of the array (leaves fill it from the end).
    deepest = tree.tree_indices.index(len(tree.tree) - 1)
    proof_hashes = len(tree.proof(deepest))
    print(f"wallets: {args.wallets}")
    print(f"tree_build_seconds: {tree_build:.3f}")
    print(f"tree_build_and_store_seconds: {build_and_store:.3f}")
    print(f"tree_json_bytes: {tree_bytes}")
    print(f"proof_hashes_max: {proof_hashes} (ceil(log2 n) = {math.ceil(math.log2(args.wallets))})")
    print(f"proof_bytes: {proof_hashes * 32}")
    print(f"epoch_seconds: {epoch:.3f}")
    print(f"claims: {len(gas)} in {claims:.3f} s")
    print(f"claim_gas_max: {max(gas)}")
    print(f"claim_gas_mean: {sum(gas) / len(gas):.0f}")
    print(f"summary: {json.dumps({'root': tree.root, 'total': view['totalAmount']})}")
    print(f"ratio: {epoch / tree_build:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
