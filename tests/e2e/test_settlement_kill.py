"""A settling process killed with SIGKILL at each step, on anvil: the next settlement of the epoch
resumes it with one mint and one root, and the chain holds the ledger's total."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from eth_account import Account

from cli.anvil import ANVIL_OWNER_KEY
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.settlement.chain import Chain, RewardContracts
from pipeline.settlement.epochs import SettlementTarget, settle_epoch
from pipeline.store.objectstore import LocalObjectStore
from tests.settlement.test_epochs import STEPS
from tests.support.evm import on_chain
from tests.support.ledger import LedgerWriter
from tests.support.processes import REPO

# It starts anvil and one Python process per step.
pytestmark = pytest.mark.slow
TOKEN = 10**18
EPOCH = "2026-12-07"

# The settler: the test's store and chain, killed by the kernel when it reaches the step.
SETTLER = """
import json, os, signal, sys
from pathlib import Path
from eth_account import Account
from pipeline.core.db import Database
from pipeline.settlement.chain import Chain, RewardContracts
from pipeline.settlement.epochs import SettlementTarget, settle_epoch
from pipeline.store.objectstore import LocalObjectStore

a = json.loads(sys.argv[1])
target = SettlementTarget(
    chain=Chain.over_http(a["rpc"]),
    owner=Account.from_key(a["key"]),
    contracts=RewardContracts(token=a["token"], distributor=a["distributor"]),
)

def checkpoint(reached):
    if reached == a["step"]:
        os.kill(os.getpid(), signal.SIGKILL)

settle_epoch(Database(a["db"]), LocalObjectStore(Path(a["objects"])), target, a["epoch"],
             checkpoint=checkpoint)
sys.exit(3)  # not killed: the step was never reached
"""


def _target(anvil: str, contracts: RewardContracts) -> SettlementTarget:
    return SettlementTarget(
        chain=Chain.over_http(anvil), owner=Account.from_key(ANVIL_OWNER_KEY), contracts=contracts
    )


@pytest.mark.parametrize("step", STEPS)
def test_a_settler_killed_by_sigkill_at_any_step_is_resumed_with_one_mint_and_one_root(
    settings: Settings,
    db: Database,
    store: LocalObjectStore,
    anvil: str,
    deployed: RewardContracts,
    step: str,
) -> None:
    wallets = [Account.create().address for _ in range(2)]
    LedgerWriter(db, store).pay([(wallets[0], 4 * TOKEN + 3), (wallets[1], 1)])
    args = {
        "db": settings.resolved_database_url,
        "objects": str(store.root),
        "rpc": anvil,
        "key": ANVIL_OWNER_KEY,
        "token": deployed.token,
        "distributor": deployed.distributor,
        "epoch": EPOCH,
        "step": step,
    }
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    child = subprocess.run(
        [sys.executable, "-c", SETTLER, json.dumps(args)], env=env, capture_output=True, text=True
    )
    assert child.returncode == -signal.SIGKILL, child.stderr

    view = settle_epoch(db, store, _target(anvil, deployed), EPOCH)

    assert view is not None and view["status"] == "settled" and view["number"] == 1
    assert view["totalAmount"] == str(4 * TOKEN + 4) and view["mintedAmount"] == str(4 * TOKEN + 4)
    assert on_chain(Chain.over_http(anvil), deployed) == {
        "supply": 4 * TOKEN + 4,
        "mints": 1,
        "roots": 1,
        "root": view["root"],
        "epoch": 1,
    }
    # Settling again sends nothing more.
    assert settle_epoch(db, store, _target(anvil, deployed), EPOCH) == view
    assert on_chain(Chain.over_http(anvil), deployed)["roots"] == 1
