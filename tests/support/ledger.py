"""Reward ledger rows for settlement tests, written directly (no model training)."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.core.db import Database
from pipeline.core.tables import Evaluation, RewardEntry
from pipeline.core.token_units import tokens_from_units
from pipeline.store.objectstore import ObjectStore
from tests.support.pipeline import DEMO_MODEL, add_benchmark


class LedgerWriter:
    """Writes one evaluation's ledger rows per `pay` call, as `pay_evaluation` would."""

    def __init__(self, db: Database, store: ObjectStore) -> None:
        self.db = db
        self.spec_id, _ = add_benchmark(db, store, rows=None)

    def pay(self, amounts: Sequence[tuple[str, int]]) -> list[int]:
        """Ledger rows of (EIP-55 wallet, base units); their ids."""
        with self.db.session() as session:
            evaluation = Evaluation(
                model_id=DEMO_MODEL,
                benchmark_spec_id=self.spec_id,
                trigger="manual",
                metric_name="accuracy",
                metric_direction="higher_is_better",
                score=0.9,
            )
            session.add(evaluation)
            session.flush()
            entries = [
                RewardEntry(
                    evaluation_id=evaluation.id,
                    model_id=DEMO_MODEL,
                    wallet_address=wallet,
                    tokens=tokens_from_units(units),
                    units=units,
                )
                for wallet, units in amounts
            ]
            session.add_all(entries)
            session.flush()
            return [entry.id for entry in entries]
