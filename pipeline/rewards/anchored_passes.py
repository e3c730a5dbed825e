"""Binomial chord passes in float32 around the full fit, as precise as float64's
(`pipeline.rewards.surrogate_fits.coalition_fits` runs them): the parts seen from the fit on
every part (`Anchored`), and the step's factor of the probabilities' change by a rational
approximation of tanh near 0 (`logistic_shift`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pipeline.rewards.logistic_parts import LogisticPart

# Coalitions' linear predictors computed at once are chunked to about this many cells.
CHUNK_CELLS = 4_000_000

# The float32 chord passes work through rows in blocks of about this many cells (`shifts`):
# 128 KiB of float32, well within a core's 512 KiB L2 cache here.
BLOCK_CELLS = 32_768


# Binomial passes run around the full fit in float32 unless a row's linear predictor there is
# beyond this: its tanh rounds to ±1 in float32 and the difference formula loses it.
ANCHOR_LIMIT = 15.0


@dataclass(frozen=True)
class Anchored:
    """Binomial parts seen from the full fit β*, for chord passes in float32 that keep float64's
    precision: a part's gradient at β is its gradient at β* (float64, once) minus
    (W X)ᵀ (σ(η* + Δη) − σ(η*)), and with T = tanh(η*/2), u = tanh(Δη/2) that difference is
    ½ (1 − T²) u / (1 + T u): each factor with a relative error of float32's, so the
    difference is as precise relative to itself, however small the step. What float32's
    sums still leave along directions no row sees (the one-hot columns of a feature summed,
    minus the intercept: X v = 0, so the exact data gradient has no part there, and the
    penalty alone sets the coefficients there) is left out: the passes work on the rows'
    coordinates in an orthonormal basis V of the directions they see, X V (as many columns as
    X has independent ones: two fewer than the features on the demo data's two categorical
    columns, so two fewer products a cell in each of a pass's two matrix products), and what
    they find is mapped back by V, which holds nothing along the unseen directions."""

    # Per part, in float32, laid out so that a pass's cells are coalitions x rows and each
    # row's T multiplies along the contiguous axis (a third of the time of a column of T
    # broadcast over a rows x coalitions block, and the second product is faster so too).
    x_t: tuple[np.ndarray, ...]  # (X V)ᵀ (seen directions x rows)
    tanh: tuple[np.ndarray, ...]  # T per row (1 x rows)
    moment: tuple[np.ndarray, ...]  # W ½(1 − T²) X V (rows x seen directions)
    basis: np.ndarray  # V: the directions the rows see (features x seen directions)

    @classmethod
    def of(
        cls,
        parts: Sequence[LogisticPart],
        full: np.ndarray,
        hessians: Sequence[np.ndarray],
        linear: Sequence[np.ndarray] | None = None,
    ) -> Anchored | None:
        """`linear`: each part's linear predictors at `full` (rows x 1), when known."""
        if full.shape[0] != 1:
            return None  # multinomial: float64 and float32 passes (`_gradients`)
        if linear is None:
            linear = [part.x @ full.T for part in parts]
        etas = [eta[:, 0] for eta in linear]
        if max((float(np.max(np.abs(e))) for e in etas if len(e)), default=0.0) > ANCHOR_LIMIT:
            return None
        values, vectors = np.linalg.eigh(sum(hessians))
        basis = vectors[:, values > 1e-9 * max(float(values[-1]), 1e-300)]
        xs, tanhs, moments = [], [], []
        for part, eta in zip(parts, etas, strict=True):
            t = np.tanh(0.5 * eta)
            seen = part.x @ basis
            xs.append(np.ascontiguousarray(seen.T, dtype=np.float32))
            tanhs.append(t.astype(np.float32)[None, :])
            curvature = part.weight * 0.5 * (1.0 - t * t)
            moments.append(np.asarray(seen * curvature[:, None], dtype=np.float32))
        return cls(tuple(xs), tuple(tanhs), tuple(moments), basis)

    def shifts(self, deltas: np.ndarray, membership: np.ndarray) -> np.ndarray:
        """Σ over each coalition's parts of (W X)ᵀ (σ(η* + Δη) − σ(η*)), `deltas` = β − β*
        (coalitions x 1 x features), `membership` coalitions x parts (1: a member)."""
        dims = self.basis.shape[1]
        total = np.zeros((len(deltas), dims))
        half = (deltas[:, 0, :] @ (0.5 * self.basis)).astype(np.float32)  # Δη / 2 = X V Vᵀ δ / 2
        anchors = zip(self.x_t, self.tanh, self.moment, strict=True)
        for index, (x_t, t, moment) in enumerate(anchors):
            holders = np.flatnonzero(membership[:, index])
            rows_count = x_t.shape[1]
            chunk = max(1, CHUNK_CELLS // max(rows_count, 1))
            for start in range(0, len(holders), chunk):
                ids = holders[start : start + chunk]
                steps = half[ids]
                # Rows in blocks of about BLOCK_CELLS cells: the elementwise passes over a
                # block then stay in the core's cache, where over all rows at once each pass
                # went to memory (two to three times the time on this machine).
                block = max(1, BLOCK_CELLS // len(ids))
                part = np.zeros((len(ids), dims))
                for first in range(0, rows_count, block):
                    rows = slice(first, first + block)
                    shift = logistic_shift(steps @ x_t[:, rows], t[:, rows])  # from Δη / 2
                    part += shift @ moment[rows]
                total[ids] += part
        return np.asarray((total @ self.basis.T)[:, None, :])


# Within ±PADE_LIMIT, tanh(h) is taken as h (15 + h²) / (15 + 6 h²), its continued fraction
# cut after the third term: relative error below 1.6e-7 (float64; 3.5e-7 in float32, under
# three units of the last place), for 8 elementwise operations a cell with the difference's own
# division where the series to the 9th power took 13.
PADE_LIMIT = 0.25


def logistic_shift(half_steps: np.ndarray, tanh_full: np.ndarray) -> np.ndarray:
    """u / (1 + T u) with u = tanh(h), h = Δη / 2 (`half_steps`, float32, a cell per row and
    coalition, overwritten) and T = tanh(η* / 2) per row (`tanh_full`, broadcast): the factor of
    σ(η* + Δη) − σ(η*) = ½ (1 − T²) u / (1 + T u) that depends on the step (`Anchored`).
    By `PADE_LIMIT`'s fraction, u / (1 + T u) = N / (M + T N) with N = h (15 + h²) and
    M = 15 + 6 h² (no cancellation: M ≥ 15 > |T N|); beyond it, by NumPy's tanh."""
    h = half_steps
    z = h * h
    if not z.size or float(z.max()) > PADE_LIMIT * PADE_LIMIT:
        np.tanh(h, out=h)
        np.multiply(h, tanh_full, out=z)
        z += 1.0
        h /= z
        return np.asarray(h)
    n = z + np.float32(15.0)
    n *= h  # N
    z *= np.float32(6.0)
    z += np.float32(15.0)  # M
    np.multiply(n, tanh_full, out=h)
    z += h
    n /= z
    return np.asarray(n)
