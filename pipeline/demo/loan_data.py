"""Synthetic rows for the second demo model, `loan-default`, whose owner arrives with a model.

Default depends on the debt-to-income ratio, late payments and the loan's size against the
income, with thresholds and an interaction (late payments hurt more when debt is high): a
gradient-boosted model learns them, and learns them better from more rows. The owner's
benchmark file carries a `split` column: its `train` rows are the base training data the owner's
model is already trained on, its `test` rows the benchmark. A contribution of 1,000 new rows
then improves that already-trained model by a few percent, not by the tens of percent a model
trained from nothing would show. Generation is seeded: the same arguments give the same rows.
"""

from __future__ import annotations

import math
import random
from typing import Any

DEMO_LOAN_MODEL_NAME = "loan-default"
PURPOSES = ("car", "home", "education", "business", "debt-consolidation")
_PURPOSE_EFFECT = {
    "car": 0.0,
    "home": -0.75,
    "education": 0.45,
    "business": 1.05,
    "debt-consolidation": 0.6,
}
# Share of the demo benchmark's rows that are the owner's base training data (`train` split).
BASE_SHARE = 0.25
BASE_SPLIT = "train"
EVAL_SPLIT = "test"


def default_probability(row: dict[str, Any]) -> float:
    """The probability of default the generator draws labels from."""
    debt, late, income = row["debt_to_income"], row["late_payments"], row["annual_income"]
    burden = row["loan_amount"] / income
    logit = (
        1.5
        * (
            -2.0
            + 9.0 * max(0.0, debt - 0.4)
            + 1.1 * min(late, 4)
            - 1.2 * (income > 80_000)
            + 4.0 * max(0.0, burden - 0.35)
            - 0.08 * min(row["years_employed"], 15)
            + (1.5 if late >= 2 and debt > 0.35 else 0.0)
        )
        + _PURPOSE_EFFECT[row["purpose"]]
    )
    return 1.0 / (1.0 + math.exp(-logit))


def loan_row(rng: random.Random, likely: bool = False) -> dict[str, Any]:
    """One row valid against the demo model's data-spec; `likely`: the most likely label."""
    row: dict[str, Any] = {
        "annual_income": round(min(1_000_000.0, rng.lognormvariate(10.9, 0.45)), 2),
        "debt_to_income": round(rng.betavariate(2, 4), 3),
        "late_payments": min(10, int(rng.expovariate(1.0))),
        "years_employed": rng.randint(0, 40),
        "purpose": rng.choice(PURPOSES),
        "loan_amount": round(rng.uniform(1000.0, 40_000.0), 2),
    }
    p = default_probability(row)
    row["defaulted"] = int(p >= 0.5) if likely else int(rng.random() < p)
    return row


def loan_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """`count` rows, labels drawn from the probability."""
    rng = random.Random(seed)
    return [loan_row(rng) for _ in range(count)]


def with_splits(rows: list[dict[str, Any]], base_share: float = BASE_SHARE) -> list[dict[str, Any]]:
    """The rows with a `split` column: the first `base_share` of them `train`, the rest `test`."""
    base = round(len(rows) * base_share)
    return [{**row, "split": BASE_SPLIT if i < base else EVAL_SPLIT} for i, row in enumerate(rows)]
