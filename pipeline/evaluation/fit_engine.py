"""Where an evaluation's model fits run: this process's threads, or a dask.distributed cluster.

The models an evaluation trains (with the batch, without it on a cache miss, the coalitions of
a small batch) are independent. They are handed to joblib, whose backend is either

- embedded (default, `VALUATION_CLUSTER_ADDRESS` unset): `PARALLEL_WORKERS` threads of this
  process; scikit-learn's fitting code releases the GIL for most of its work, and nothing is
  copied; or
- a dask.distributed scheduler (`VALUATION_CLUSTER_ADDRESS=tls://scheduler:8786`): joblib's
  `dask` backend submits each fit to the cluster's workers, which a deployment runs on other
  machines (docs/operations.md). joblib scatters the large arguments (the training frame, the
  scorer with its benchmark) to the workers once per call. With `VALUATION_CLUSTER_TLS_*` the
  client connects by mutual TLS (dask's `Security`, encryption required): the scheduler accepts
  only clients with a certificate of the cluster's CA, and this client only that scheduler.

Each fit runs on one native thread (BLAS, OpenMP: `pipeline.models.threads.THREADS`), so a
fit's time does not depend on how many other fits or processes share the cores.

Either way a fit is `BenchmarkScorer.predict`: what comes back is the benchmark predictions,
never a model object.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import pandas as pd

from pipeline.evaluation.metrics import Predictions
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.models.threads import THREADS

if TYPE_CHECKING:
    from pipeline.core.config import Settings

# How long a process waits for the scheduler at the first fit before failing the evaluation.
CONNECT_TIMEOUT = "10s"


@dataclass(frozen=True)
class ClusterTls:
    """The PEM files of mutual TLS with the cluster: its CA, this client's cert (and key)."""

    ca_file: str
    cert_file: str
    key_file: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> ClusterTls | None:
        ca, cert = settings.valuation_cluster_tls_ca_file, settings.valuation_cluster_tls_cert_file
        if ca is None or cert is None:
            return None
        key = settings.valuation_cluster_tls_key_file
        return cls(str(ca), str(cert), str(key) if key is not None else None)


@dataclass(frozen=True)
class FitEngine:
    """Threads of this process (`address` None) or the dask cluster at `address`."""

    workers: int = 1
    address: str | None = None
    tls: ClusterTls | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> FitEngine:
        return cls(
            settings.parallel_workers,
            settings.valuation_cluster_address or None,
            ClusterTls.from_settings(settings),
        )

    @property
    def name(self) -> str:
        return f"dask {self.address}" if self.address else f"threads x{self.workers}"

    def predict_many(
        self, scorer: BenchmarkScorer, frames: Sequence[pd.DataFrame]
    ) -> list[Predictions]:
        """Train on each frame and predict the benchmark, in parallel; results in order."""
        if not frames:
            return []
        if self.address is None:
            with _native_threads:
                return self._local(scorer, frames)
        # joblib lazily: the API and the CLI import this package without fitting anything.
        from joblib import Parallel, delayed, parallel_config

        calls = [delayed(_predict)(scorer, frame) for frame in frames]
        with parallel_config(backend="dask", client=_client(self.address, self.tls)):
            return list(Parallel(n_jobs=-1)(calls))

    def _local(self, scorer: BenchmarkScorer, frames: Sequence[pd.DataFrame]) -> list[Predictions]:
        if self.workers == 1 or len(frames) == 1:
            return [scorer.predict(frame) for frame in frames]
        from joblib import Parallel, delayed

        calls = [delayed(_predict)(scorer, frame) for frame in frames]
        jobs = min(self.workers, len(frames))
        return list(Parallel(n_jobs=jobs, backend="threading")(calls))


def _predict(scorer: BenchmarkScorer, frame: pd.DataFrame) -> Predictions:
    return scorer.predict(frame)


class _NativeThreads:
    """BLAS limited to `THREADS` (one) thread while any local fit of this process runs.

    BLAS's thread pool is the process's: two fits side by side on a 2-core machine would each
    start one BLAS thread per core, and on a loaded machine spinning threads bill their waits
    as CPU time. Because the limit is process-wide, overlapping callers (two valuations in
    threads of one process) share one limit: the first sets it, the last restores it; each
    saving and restoring its own would leave the process at the wrong count. OpenMP's limit
    is per calling thread: `pipeline.models.single_thread` sets it around the fits that use it.
    Dask workers start with one thread of each (distributed's `pre-spawn-environ`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._limit: Any = None

    def __enter__(self) -> None:
        with self._lock:
            if self._users == 0:
                self._limit = _controller().limit(limits=THREADS, user_api="blas")
            self._users += 1

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                self._limit.restore_original_limits()
                self._limit = None


@lru_cache(maxsize=1)
def _controller() -> Any:
    """threadpoolctl's view of this process's native libraries, taken once: building it scans
    every loaded library (2-3 ms, a twentieth of a small model's fit, at every valuation).
    The BLAS libraries fits use are NumPy's and SciPy's; SciPy's is loaded here first, since a
    view taken before a library is loaded never limits it."""
    import scipy.linalg  # noqa: F401
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


_native_threads = _NativeThreads()


_connected: set[tuple[str, ClusterTls | None]] = set()


@lru_cache(maxsize=4)
def _client(address: str, tls: ClusterTls | None = None) -> Any:
    """One client per scheduler address and process (connecting costs a round trip)."""
    from distributed import Client

    security: Any = None
    if tls is not None:
        from distributed.security import Security

        security = Security(  # type: ignore[no-untyped-call]
            require_encryption=True,
            tls_ca_file=tls.ca_file,
            tls_client_cert=tls.cert_file,
            tls_client_key=tls.key_file,
        )
    _connected.add((address, tls))
    return Client(  # type: ignore[no-untyped-call]
        address, security=security, set_as_default=False, timeout=CONNECT_TIMEOUT
    )


def close_clients() -> None:
    """Close this process's cluster clients (a later fit connects again)."""
    for address, tls in list(_connected):
        _client(address, tls).close()
    _connected.clear()
    _client.cache_clear()
