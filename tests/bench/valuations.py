"""A batch's valuation as the payout bench reads it, built from its shares (tests/bench)."""

from __future__ import annotations

from pipeline.rewards.interval import Interval
from pipeline.rewards.valuation import SHARE_REJECTED, BatchValuation


def paid_batch(shares: dict[str, float], rejected: tuple[str, ...] = ()) -> BatchValuation:
    """An exact, significant valuation paying `shares` (the `rejected` keys rejected for their
    share): its pool is the sum of the others'."""
    pool = sum(v for k, v in shares.items() if k not in rejected)
    return BatchValuation(
        metric_name="accuracy",
        direction="higher_is_better",
        score_without=0.8,
        score_with=0.8 * (1 + pool / 100),
        pool_pct=pool,
        interval=Interval(pool / 2, pool * 1.5, 0.95, 200),
        denominator=0.8,
        method="exact",
        players=len(shares),
        accepted=[k for k in shares if k not in rejected],
        rejected=dict.fromkeys(rejected, SHARE_REJECTED),
        shares=shares,
    )
