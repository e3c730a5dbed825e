"""The chord passes' float32 tanh (`anchored_passes.tanh_in_place`): within one unit of the last
place of the exact value where it uses its series, NumPy's own beyond."""

from __future__ import annotations

import numpy as np

from pipeline.rewards.anchored_passes import SERIES_LIMIT, tanh_in_place

EPS = float(np.finfo(np.float32).eps)


def _relative_error(values: np.ndarray) -> float:
    exact = np.tanh(values.astype(np.float64))
    computed = values.copy()
    tanh_in_place(computed)
    assert computed.dtype == np.float32
    nonzero = exact != 0
    error = np.abs(computed.astype(np.float64) - exact)[nonzero] / np.abs(exact[nonzero])
    return float(error.max())


def test_within_the_series_limit_tanh_is_exact_to_float32s_rounding() -> None:
    values = np.linspace(-SERIES_LIMIT, SERIES_LIMIT, 200_001, dtype=np.float32)[:, None]
    assert _relative_error(values) <= EPS
    tiny = np.array([[1e-30, -1e-12, 3e-6, 0.0]], dtype=np.float32)
    assert _relative_error(tiny) <= EPS


def test_beyond_the_series_limit_numpys_tanh_is_used() -> None:
    values = np.linspace(-20, 20, 4001, dtype=np.float32)[:, None]
    expected = np.tanh(values)
    computed = values.copy()
    tanh_in_place(computed)
    np.testing.assert_array_equal(computed, expected)
