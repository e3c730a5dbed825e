"""The fits' BLAS limit is the process's: overlapping local fits share it, and the process gets
its own thread count back when the last of them ends, whatever order they end in."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import scipy.linalg  # noqa: F401  # every BLAS a fit uses is loaded, as in a process that fits
from threadpoolctl import threadpool_info, threadpool_limits

from pipeline.evaluation.fit_engine import _native_threads


def _blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_overlapping_fits_restore_the_process_blas_threads_when_the_last_one_ends() -> None:
    with threadpool_limits(limits=3, user_api="blas"):
        assert _blas_threads() == {3}
        first, second = _native_threads, _native_threads
        first.__enter__()
        second.__enter__()  # a second valuation's fits start while the first's run
        assert _blas_threads() == {1}
        first.__exit__(None, None, None)  # the first ends while the second still fits
        assert _blas_threads() == {1}
        second.__exit__(None, None, None)
        assert _blas_threads() == {3}


def test_the_limit_reaches_scipys_blas_even_when_the_first_fit_comes_before_scipy() -> None:
    # The engine's view of the libraries is taken once, at the first fit. A process whose first
    # fit starts before SciPy is imported must still limit SciPy's BLAS (the one scikit-learn's
    # solvers call), or those fits would run on every core. A fresh interpreter shows it.
    script = """
import numpy
from threadpoolctl import threadpool_info
from pipeline.evaluation.fit_engine import _native_threads
with _native_threads:
    pass
import scipy.linalg
with _native_threads:
    print(sorted((p["filepath"], p["num_threads"]) for p in threadpool_info()
                 if p["user_api"] == "blas"))
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    pools = ast.literal_eval(out.strip())
    assert any("scipy" in path for path, _ in pools), pools
    assert {threads for _, threads in pools} == {1}, pools
