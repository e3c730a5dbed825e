"""`marketplace dev` (issue 2): API and Dagster UI start on a fresh data dir; Ctrl-C stops both."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, proc: subprocess.Popen[bytes], seconds: float) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"marketplace dev exited early with {proc.returncode}")
        try:
            return httpx.get(url, timeout=2)
        except httpx.TransportError:
            time.sleep(0.5)
    pytest.fail(f"{url} did not answer within {seconds} s")


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
def test_dev_serves_api_and_dagster_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    api_port, dagster_port = free_port(), free_port()
    env = {
        **os.environ,
        "MARKETPLACE_DATA_DIR": str(tmp_path / "data"),
        "JWT_SECRET": "dev-test-secret-dev-test-secret-0123",
    }
    for name in ("DATABASE_URL", "DAGSTER_HOME", "SERVICE_DATASET_BUCKET", "DAGSTER_PG_URL"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "dev", "--port", str(api_port),
         "--dagster-port", str(dagster_port)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        models = wait_for(f"http://127.0.0.1:{api_port}/api/models", proc, 60)
        assert models.json()[0]["name"] == "customer-churn"  # seeded on a fresh store
        ui = wait_for(f"http://127.0.0.1:{dagster_port}/server_info", proc, 90)
        assert ui.status_code == 200
        assert (tmp_path / "data" / "dagster" / "dagster.yaml").is_file()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            returncode = proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("marketplace dev did not stop within 40 s of Ctrl-C")
    assert returncode == 0
    for port in (api_port, dagster_port):
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still served"
