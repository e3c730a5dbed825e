"""The fits' BLAS limit is the process's: overlapping local fits share it, and the process gets
its own thread count back when the last of them ends, whatever order they end in."""

from __future__ import annotations

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
