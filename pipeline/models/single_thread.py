"""A scikit-learn Pipeline whose fit and predictions run OpenMP code on one thread.

HistGradientBoosting has no thread parameter: it uses as many OpenMP threads as the calling
thread may (`omp_get_max_threads`, a per-thread setting). On a busy machine with every core
shared, OpenMP's spinning threads make a fit 10 to 20 times slower than one thread, and a
valuation already fits its coalitions on its own worker threads. Results do not depend on the
thread count; only the time does. Imported by `pipeline.models.estimators` when it builds a
pipeline for such an estimator (scikit-learn is heavy to import).
"""

from __future__ import annotations

from typing import Any

from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits

from pipeline.models.threads import THREADS


class OneThreadPipeline(Pipeline):  # type: ignore[misc]  # sklearn has no type hints
    """A Pipeline that limits OpenMP to one thread around fit, predict and predict_proba."""

    def fit(self, X: Any, y: Any = None, **params: Any) -> OneThreadPipeline:  # noqa: N803
        with threadpool_limits(limits=THREADS, user_api="openmp"):
            super().fit(X, y, **params)
        return self

    def predict(self, X: Any, **params: Any) -> Any:  # noqa: N803
        with threadpool_limits(limits=THREADS, user_api="openmp"):
            return super().predict(X, **params)

    def predict_proba(self, X: Any, **params: Any) -> Any:  # noqa: N803
        with threadpool_limits(limits=THREADS, user_api="openmp"):
            return super().predict_proba(X, **params)
