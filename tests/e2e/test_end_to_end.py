"""End to end through `dagster-daemon` in a temp DAGSTER_HOME (spec §1, §4.2, §4.3, §6).

A benchmark is uploaded and rows are contributed over HTTP; the daemon's arrival sensor picks
both up from the embedded queue and requests one run (debounce window 0), its run queue
launches the evaluation job, and the contribution is read back over HTTP as `rewarded`, with
tokens, a ledger entry for the manifest's wallet and the metric history.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pipeline.core.config import Settings
from pipeline.demo.churn_data import churn_benchmark_rows, churn_rows
from tests.support.pipeline import WALLET_A, manifest
from tests.support.processes import stop_group

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 240
TERMINAL = {"rewarded", "rejected", "failed"}


@pytest.fixture
def e2e_settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(evaluation_debounce_window_seconds=0)


@pytest.fixture
def e2e_client(e2e_settings: Settings) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from api.app import create_app

    app = create_app(e2e_settings)
    with TestClient(app) as client:
        yield client
    app.state.db.dispose()


@contextmanager
def dagster_daemon(settings: Settings, home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`dagster-daemon run` on the workspace, its own process group, stopped on exit."""
    home.mkdir()
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "MARKETPLACE_DATA_DIR": str(settings.marketplace_data_dir),
        "DATABASE_URL": settings.resolved_database_url,
        "EVALUATION_DEBOUNCE_WINDOW_SECONDS": "0",
        "PYTHONUNBUFFERED": "1",
    }
    log = (home / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield daemon
    finally:
        stop_group(daemon)
        log.close()


def daemon_log(home: Path) -> str:
    path = home / "daemon.log"
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"])
def test_upload_contribution_arrival_evaluation_reward(
    e2e_settings: Settings,
    e2e_client: Any,
    platform_key: Callable[..., str],
    auth_headers: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> None:
    client = e2e_client
    key = platform_key("admin", scopes=["benchmarks:write"])  # the demo model's owner
    benchmark = pd.DataFrame(churn_benchmark_rows(300, seed=11)).to_csv(index=False).encode()
    uploaded = client.post(
        "/api/v1/benchmarks/upload/1",
        headers={"Authorization": f"Bearer {key}"},
        files={"file": ("churn-benchmark.csv", benchmark)},
        data={"target_column": "churned", "metric_name": "accuracy", "eval_split": "test"},
    )
    assert uploaded.status_code == 201, uploaded.text
    spec_id = uploaded.json()["spec_id"]

    body = {
        "modelId": 1,
        "benchmarkSpecId": None,
        "rows": churn_rows(250, seed=12),
        "manifest": manifest(WALLET_A),
    }
    submitted = client.post("/api/models/1/contributions", headers=auth_headers(), json=body)
    assert submitted.status_code == 202, submitted.text
    job_url = f"/api/models/1/contributions/{submitted.json()['jobId']}"

    home = tmp_path / "dagster_home"
    started = time.monotonic()
    with dagster_daemon(e2e_settings, home) as daemon:
        view: dict[str, Any] = {}
        while time.monotonic() - started < DEADLINE_SECONDS:
            assert daemon.poll() is None, daemon_log(home)
            view = client.get(job_url, headers=auth_headers()).json()
            if view["status"] in TERMINAL:
                break
            time.sleep(1)
    elapsed = time.monotonic() - started

    assert view.get("status") == "rewarded", (view, daemon_log(home))
    assert view["tokens"] > 0 and view["improvementPct"] > 0
    rewards = client.get("/api/rewards", params={"wallet": WALLET_A}).json()
    assert [e["jobId"] for e in rewards["entries"]] == [view["jobId"]]
    assert rewards["totalTokens"] == pytest.approx(view["tokens"])
    history = client.get("/api/models/1/evaluations").json()["evaluations"]
    assert {e["benchmarkSpecId"] for e in history} == {spec_id}
    assert [e["kind"] for e in history] == ["contribution", "rescore"]
    assert all(e["trigger"] == "arrival" and e["runId"] for e in history)
    arrivals = client.get(
        "/api/v1/dataset-arrivals", headers={"Authorization": f"Bearer {platform_key('admin')}"}
    ).json()["arrivals"]
    assert len(arrivals) == 2 and len({a["run_key"] for a in arrivals}) == 1
    print(f"end to end through dagster-daemon: {elapsed:.1f} s")
