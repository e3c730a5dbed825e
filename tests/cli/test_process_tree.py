"""Clean stops (issue 13): a signal to the parent only takes its whole process tree down.

`marketplace dev` runs Dagster (webserver, daemon, code servers) under a watchdog; SIGTERM drains
in-flight requests and stops Dagster within SHUTDOWN_GRACE_SECONDS, and after a SIGKILL of the
parent the watchdog notices (end-of-file on its pipe) and stops the rest. Every process is
recorded from /proc before the signal, so a process that escaped the tree still counts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from pipeline.auth.sessions import issue_token
from pipeline.core.config import Settings
from pipeline.demo.churn_data import churn_rows
from tests.support.processes import (
    GRACE,
    JWT_SECRET,
    MARGIN,
    Started,
    free_port,
    log_of,
    start,
    start_serve,
    started_processes,
    wait_all_gone,
    wait_for,
)


@pytest.fixture
def started() -> Iterator[Started]:
    yield from started_processes()


class SlowContribution(threading.Thread):
    """A contribution whose body trickles in over `seconds`: in flight when the signal comes."""

    def __init__(self, url: str, seconds: float = 3.0) -> None:
        super().__init__(daemon=True)
        token = issue_token(Settings(jwt_secret=SecretStr(JWT_SECRET)), "in-flight")
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        body = json.dumps({"modelId": 1, "benchmarkSpecId": None, "rows": churn_rows(200)})
        self.payload = body.encode()
        self.seconds = seconds
        self.first_chunk_sent = threading.Event()
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None

    def chunks(self) -> Iterator[bytes]:
        pieces = 10
        size = len(self.payload) // pieces + 1
        for i in range(pieces):
            yield self.payload[i * size : (i + 1) * size]
            self.first_chunk_sent.set()
            time.sleep(self.seconds / pieces)

    def run(self) -> None:
        try:
            self.response = httpx.post(
                f"{self.url}/api/models/1/contributions",
                content=self.chunks(),
                headers=self.headers,
                timeout=30,
            )
        except BaseException as exc:  # reported by the test
            self.error = exc


def send_during_request(proc: subprocess.Popen[bytes], url: str, sig: int) -> SlowContribution:
    request = SlowContribution(url)
    request.start()
    assert request.first_chunk_sent.wait(10)
    time.sleep(0.3)
    proc.send_signal(sig)
    return request


def assert_request_completed(request: SlowContribution) -> None:
    request.join(30)
    assert request.error is None, request.error
    assert request.response is not None
    assert request.response.status_code == 202, request.response.text


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_signal_to_dev_parent_stops_whole_tree(tmp_path: Path, started: Started, sig: int) -> None:
    api_port, dagster_port = free_port(), free_port()
    proc = start(
        ["dev", "--port", str(api_port), "--dagster-port", str(dagster_port)], tmp_path, started
    )
    api = f"http://127.0.0.1:{api_port}"
    wait_for(f"{api}/healthz", proc, 60)
    wait_for(f"http://127.0.0.1:{dagster_port}/server_info", proc, 120)
    tree = started.record(proc)
    commands = " ".join(tree.values())
    # The grandchildren that used to be orphaned are part of what is checked.
    for part in ("cli.dagster_dev dev", "cli.dagster_webserver", "dagster._daemon", "code-server"):
        assert part in commands, f"{part!r} not running: {tree}"

    request = send_during_request(proc, api, sig) if sig == signal.SIGTERM else None
    if sig == signal.SIGKILL:
        proc.send_signal(sig)
    signalled = time.monotonic()
    left = wait_all_gone([proc.pid, *tree], GRACE + MARGIN)  # a zombie counts as gone
    took = time.monotonic() - signalled
    names = [tree.get(pid, "marketplace dev")[:80] for pid in left]
    assert not left, f"still running after {took:.1f} s: {names}\n{log_of(tmp_path)}"
    returncode = proc.wait(timeout=5)
    if request is not None:
        assert_request_completed(request)
        assert returncode == 0, log_of(tmp_path)


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
def test_sigterm_to_serve_finishes_in_flight_request_then_exits(
    tmp_path: Path, started: Started
) -> None:
    proc, url = start_serve(tmp_path, started)

    request = send_during_request(proc, url, signal.SIGTERM)
    assert proc.wait(timeout=GRACE + MARGIN) == 0, log_of(tmp_path)
    assert_request_completed(request)
