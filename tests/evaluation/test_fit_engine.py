"""The fits of an evaluation on a real dask.distributed cluster of worker processes (issue 18).

The test starts a LocalCluster of two worker processes, points the fit engine at its scheduler
address (as VALUATION_CLUSTER_ADDRESS does) and checks that the fits ran in those processes and
gave what this process gives.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
from distributed import Client, LocalCluster, get_task_stream

from pipeline.core.config import load_settings
from pipeline.evaluation.fit_engine import FitEngine, close_clients
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.valuation import Player, ValuationSettings, value_batch
from tests.support.valuation import CANCER

BENCH, REST = CANCER.iloc[:169], CANCER.iloc[169:].reset_index(drop=True)
# Starts worker processes (each imports pandas and scikit-learn).
# One xdist worker runs the whole module, so its Dask cluster (module fixture) starts once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fit-engine")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as local:
        yield local
    close_clients()


def _scorer() -> BenchmarkScorer:
    return BenchmarkScorer(
        BENCH,
        task_type="classification",
        estimator="logistic_regression",
        target_column="target",
        metric_name="roc_auc",
    )


def test_the_engine_address_is_a_setting() -> None:
    engine = FitEngine.from_settings(
        load_settings(
            valuation_cluster_address="tcp://10.0.0.5:8786",
            parallel_workers=3,
            marketplace_mode="development",  # a plain scheduler off this host: not production
        )
    )
    assert engine == FitEngine(3, "tcp://10.0.0.5:8786")
    assert FitEngine.from_settings(load_settings(parallel_workers=3)) == FitEngine(3, None)


def test_fits_run_in_the_cluster_worker_processes_and_match_local_ones(
    cluster: LocalCluster,
) -> None:
    engine = FitEngine(workers=2, address=cluster.scheduler_address)
    frames = [REST.iloc[: 100 * (i + 1)] for i in range(3)]
    with Client(cluster.scheduler_address, set_as_default=False) as client:
        worker_pids = set(client.run(os.getpid).values())
        with get_task_stream(client) as stream:
            remote = engine.predict_many(_scorer(), frames)
        ran_on = {task["worker"] for task in stream.data}
    assert os.getpid() not in worker_pids and len(worker_pids) == 2
    assert ran_on and ran_on <= set(cluster.scheduler_info["workers"])
    local = FitEngine(workers=1).predict_many(_scorer(), frames)
    for mine, theirs in zip(local, remote, strict=True):
        np.testing.assert_array_equal(mine.outputs, theirs.outputs)


def test_a_batch_valued_on_the_cluster_equals_one_valued_here(cluster: LocalCluster) -> None:
    players = [Player(k, REST.iloc[i * 80 : (i + 1) * 80]) for i, k in enumerate("ab")]
    engine = FitEngine(workers=2, address=cluster.scheduler_address)
    remote = value_batch(
        _scorer(),
        None,
        players,
        higher_is_better=True,
        settings=ValuationSettings(resamples=100, engine=engine),
    )
    here = value_batch(
        _scorer(), None, players, higher_is_better=True, settings=ValuationSettings(resamples=100)
    )
    assert remote.coalitions == here.coalitions == 4
    assert (remote.pool_pct, remote.shares, remote.interval) == (
        here.pool_pct,
        here.shares,
        here.interval,
    )
