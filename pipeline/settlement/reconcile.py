"""Reconciling the chain with the ledger: what was minted and claimed (from the contracts' events)
against what the settled epochs owe.

- minted (the token's `Transfer` events from the zero address) equals the total of the last
  settled epoch: every epoch minted exactly its difference;
- every mint went to the distributor, and the distributor holds minted − claimed;
- no wallet claimed more than its settled cumulative amount (the `Claimed` events).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from pipeline.core.db import Database
from pipeline.settlement.chain import Chain, RewardContracts
from pipeline.settlement.claims import last_settled
from pipeline.settlement.snapshot import wallet_cumulative

ZERO_ADDRESS = "0x" + "00" * 20


@dataclass(frozen=True)
class Reconciliation:
    settled_total: int
    minted: int
    claimed: int
    distributor_balance: int
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def reconcile(db: Database, chain: Chain, contracts: RewardContracts) -> Reconciliation:
    token = chain.token(contracts.token)
    distributor = chain.distributor(contracts.distributor)
    mints = [
        log.args
        for log in token.events.Transfer().get_logs(from_block=0)
        if log.args["from"] == ZERO_ADDRESS
    ]
    claims: dict[str, int] = defaultdict(int)
    for log in distributor.events.Claimed().get_logs(from_block=0):
        claims[log.args["account"]] += int(log.args["amount"])
    row = last_settled(db)
    settled_total = row.total_units if row is not None else 0
    minted = sum(int(args["value"]) for args in mints)
    claimed = sum(claims.values())
    balance = int(token.functions.balanceOf(contracts.distributor).call())
    problems = []
    if minted != settled_total:
        problems.append(f"minted {minted} units on chain, the settled epochs owe {settled_total}")
    if any(args["to"] != contracts.distributor for args in mints):
        problems.append("tokens were minted to an address other than the distributor")
    if balance != minted - claimed:
        problems.append(f"the distributor holds {balance} units, not minted − claimed")
    for wallet, amount in sorted(claims.items()):
        settled = wallet_cumulative(db, wallet, row.ledger_row_id) if row is not None else 0
        if amount > settled:
            problems.append(f"{wallet} claimed {amount} units, more than its settled {settled}")
    return Reconciliation(
        settled_total=settled_total,
        minted=minted,
        claimed=claimed,
        distributor_balance=balance,
        problems=problems,
    )
