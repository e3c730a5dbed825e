"""The chord passes' step factor (`anchored_passes.logistic_shift`): u / (1 + T u), u = tanh(h),
in float32 to a few units of the last place, by its rational approximation within
`PADE_LIMIT` and by NumPy's tanh beyond."""

from __future__ import annotations

import numpy as np

from pipeline.rewards.anchored_passes import PADE_LIMIT, logistic_shift

EPS = float(np.finfo(np.float32).eps)


def _relative_error(half_steps: np.ndarray, tanh_full: np.ndarray) -> float:
    u = np.tanh(half_steps.astype(np.float64))
    exact = u / (1.0 + tanh_full.astype(np.float64) * u)
    computed = logistic_shift(half_steps.copy(), tanh_full)
    assert computed.dtype == np.float32 and computed.shape == half_steps.shape
    nonzero = exact != 0
    error = np.abs(computed.astype(np.float64) - exact)[nonzero] / np.abs(exact[nonzero])
    return float(error.max())


def _grid(limit: float) -> tuple[np.ndarray, np.ndarray]:
    """Steps within ±limit (columns: coalitions) against rows whose η* spans ±15."""
    steps = np.linspace(-limit, limit, 2001, dtype=np.float32)[None, :]
    tanh_full = np.tanh(0.5 * np.linspace(-15.0, 15.0, 301))[:, None].astype(np.float32)
    return np.broadcast_to(steps, (len(tanh_full), steps.shape[1])).copy(), tanh_full


def test_within_the_limit_the_factor_is_float32_precise() -> None:
    half_steps, tanh_full = _grid(PADE_LIMIT)
    assert _relative_error(half_steps, tanh_full) <= 4 * EPS
    tiny = np.array([[1e-30, -1e-12, 3e-6, 0.0]], dtype=np.float32)
    assert _relative_error(tiny, np.array([[0.3]], dtype=np.float32)) <= 2 * EPS


def test_beyond_the_limit_numpys_tanh_is_used() -> None:
    half_steps, tanh_full = _grid(8.0)
    u = np.tanh(half_steps)
    expected = u / (u * tanh_full + np.float32(1.0))
    np.testing.assert_array_equal(logistic_shift(half_steps, tanh_full), expected)
