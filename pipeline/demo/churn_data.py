"""Synthetic rows for the demo `customer-churn` model, with a signal a model can learn.

Churn depends on the contract term, tenure and support calls (monthly charges, payment method
and fiber add a little), so a logistic regression trained on a few hundred of these rows beats
the trivial majority-class baseline on a benchmark drawn the same way by well over 10 %.
Generation is seeded: the same arguments always give the same rows.
"""

from __future__ import annotations

import math
import random
from typing import Any

CONTRACTS = ("month-to-month", "one-year", "two-year")
PAYMENT_METHODS = ("card", "bank-transfer", "electronic-check", "mailed-check")
_CONTRACT_EFFECT = {"month-to-month": 1.6, "one-year": -0.6, "two-year": -2.2}


def churn_probability(row: dict[str, Any]) -> float:
    """The probability of churn the generator draws labels from."""
    logit = (
        _CONTRACT_EFFECT[row["contract"]]
        - 0.06 * row["tenure_months"]
        + 0.55 * row["support_calls"]
        + 0.008 * (row["monthly_charges"] - 70.0)
        + (0.3 if row.get("has_fiber") else 0.0)
        + (0.4 if row.get("payment_method") == "electronic-check" else 0.0)
        - 0.6
    )
    return 1.0 / (1.0 + math.exp(-logit))


def churn_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """`count` rows valid against the demo model's data-spec, labels drawn from the signal."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        row: dict[str, Any] = {
            "tenure_months": rng.randint(0, 72),
            "monthly_charges": round(rng.uniform(18.0, 120.0), 2),
            "contract": rng.choices(CONTRACTS, weights=(0.5, 0.3, 0.2))[0],
            "payment_method": rng.choice(PAYMENT_METHODS),
            "support_calls": min(50, int(rng.expovariate(0.6))),
            "has_fiber": rng.random() < 0.45,
        }
        row["churned"] = 1 if rng.random() < churn_probability(row) else 0
        rows.append(row)
    return rows


def churn_benchmark_rows(
    count: int, seed: int = 1, eval_split: str = "test", train_share: float = 0.0
) -> list[dict[str, Any]]:
    """Benchmark rows with a `split` column: `eval_split` for most, `train` for `train_share`."""
    rng = random.Random(seed + 7919)
    rows = churn_rows(count, seed)
    for row in rows:
        row["split"] = "train" if rng.random() < train_share else eval_split
    return rows
