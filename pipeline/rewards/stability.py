"""How sure a pool is of the noise nobody controls: its band over the owner's paired fits.

A tree model's fit moves with things no supplier chooses (which rows a tree sees, a split near
a tie). A model defined with `paired_fits` K > 1 is trained K times, fit k on the training rows
but one keyed fold (the same rows left out of fit k in "with", "without" and every coalition).
The pool is measured on the K fits' predictions together: the mean of the fits' own pools for
a metric that is a mean over rows (accuracy, mae, r2), close to it for the others. Each fit k's
pool p_k is the improvement of "with" fit k over "without" fit k; the band is the pool ± two
standard errors of their mean: a supplier sees how far another K fits could move the number.
One fit measures no band.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.evaluation.metrics import Predictions

# Two standard errors: about 95 % of the means another K fits would give, for a normal spread.
BAND_ERRORS = 2.0


@dataclass(frozen=True)
class Stability:
    """The pool's band in percent, and the paired fits it was measured over."""

    low: float
    high: float
    fits: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)

    def describe(self) -> str:
        return f"band [{self.low:+.2f}, {self.high:+.2f}] % over {self.fits} paired fits"


def band_view(stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """A band kept with a valuation (`Stability.as_dict`) as the job view and the ledger show
    it; None with one fit, or for a valuation made before bands were kept."""
    return {k: stored[k] for k in ("low", "high", "fits")} if stored else None


def pool_stability(pools: Sequence[float], centre: float | None = None) -> Stability | None:
    """The band of `pools` (one per paired fit) around `centre` (the pool paid; their mean by
    default): ± two standard errors of their mean. None for fewer than two fits or a pool that
    is not finite."""
    if len(pools) < 2 or not all(math.isfinite(p) for p in [*pools, centre or 0.0]):
        return None
    mean = math.fsum(pools) / len(pools)
    variance = math.fsum((p - mean) ** 2 for p in pools) / (len(pools) - 1)
    half = BAND_ERRORS * math.sqrt(variance / len(pools))
    middle = mean if centre is None else centre
    return Stability(middle - half, middle + half, len(pools))


def copy_pools(
    without: Predictions, with_: Predictions, higher_is_better: bool, denominator: float
) -> list[float]:
    """Each paired fit's pool in percent: the improvement of "with" fit k over "without" fit k,
    against the batch pool's `denominator` (so that their mean is the pool for a metric that
    is a mean over rows)."""
    if with_.copies != without.copies:
        raise ValueError(
            f"{with_.copies} paired fits with against {without.copies} without: "
            "the two sides must come from the same fits"
        )
    # Lazily: the ledger reads `band_view` from here, and the CLI that imports it loads no NumPy.
    from pipeline.evaluation.metrics import copy_scores

    sign = 1.0 if higher_is_better else -1.0
    gains = sign * (copy_scores(with_) - copy_scores(without))
    return [float(g) / denominator * 100.0 for g in gains]
