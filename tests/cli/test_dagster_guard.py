"""The guard in front of Dagster's webserver, on a real webserver process (issue 34, case 2).

A web page the data engineer opens can send a GraphQL mutation as a GET, or as a POST with a
"simple" content type, and a DNS name that resolves to 127.0.0.1 reaches a loopback webserver.
`python -m cli.dagster_webserver` (what `marketplace dev` runs through `cli.dagster_dev`) must
refuse those while the UI's own requests (JSON POSTs from its origin) work; and through that
GraphQL, a run's config still cannot set a deployment setting.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.dagster_dev import guarded_command
from cli.dagster_webserver import allowed_hosts
from cli.webserver_guard import host_name, is_mutation
from tests.cli.test_dev_command import free_port
from tests.support.processes import stop_group

ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 120
MUTATION = "mutation { setNuxSeen }"
LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""


@pytest.fixture(scope="module")
def webserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The guarded webserver on the repository's workspace, with a temporary instance."""
    home = tmp_path_factory.mktemp("guard")
    port = free_port()
    env = {**os.environ, "MARKETPLACE_DATA_DIR": str(home / "data"), "PYTHONPATH": str(ROOT)}
    for name in ("DAGSTER_HOME", "DATABASE_URL", "DAGSTER_UI_ALLOWED_HOSTS"):
        env.pop(name, None)
    log = (home / "webserver.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "cli.dagster_webserver", "-h", "127.0.0.1", "-p", str(port),
         "-w", "workspace.yaml"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_code_location(url, server, home / "webserver.log")
        yield url
    finally:
        stop_group(server)
        log.close()


def _wait_for_code_location(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    query = "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }"
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline and server.poll() is None:
        try:
            answer = httpx.post(f"{url}/graphql", json={"query": query}, timeout=10)
            entries = answer.json()["data"]["workspaceOrError"]["locationEntries"]
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                return
        except (httpx.TransportError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    pytest.fail(f"the webserver did not load the workspace:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
def test_the_ui_s_own_json_requests_work(webserver: str) -> None:
    query = httpx.post(f"{webserver}/graphql", json={"query": "{ version }"}, timeout=10)
    assert query.status_code == 200 and query.json()["data"]["version"]
    # A mutation from the UI's own origin, as its JavaScript sends it.
    mutation = httpx.post(
        f"{webserver}/graphql",
        json={"query": MUTATION},
        headers={"Origin": webserver},
        timeout=10,
    )
    assert mutation.status_code == 200 and mutation.json()["data"] == {"setNuxSeen": True}
    # A read by GET (the UI's GraphiQL, links) still works.
    read = httpx.get(f"{webserver}/graphql", params={"query": "{ version }"}, timeout=10)
    assert read.status_code == 200 and read.json()["data"]["version"]
    assert httpx.get(f"{webserver}/server_info", timeout=10).status_code == 200


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_mutation_posted_with_a_simple_content_type_is_refused(
    webserver: str, content_type: str
) -> None:
    answer = httpx.post(
        f"{webserver}/graphql",
        params={"query": MUTATION},
        content=f"query={MUTATION}",
        headers={"Content-Type": content_type},
        timeout=10,
    )
    assert answer.status_code == 403
    assert content_type in answer.text


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
def test_a_mutation_sent_by_get_is_refused(webserver: str) -> None:
    answer = httpx.get(f"{webserver}/graphql", params={"query": MUTATION}, timeout=10)
    assert answer.status_code == 403
    assert "mutation by GET" in answer.text


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
def test_a_foreign_host_or_origin_is_refused(webserver: str) -> None:
    rebound = httpx.post(
        f"{webserver}/graphql",
        json={"query": MUTATION},
        headers={"Host": "attacker.example:3000"},
        timeout=10,
    )
    assert rebound.status_code == 403 and "attacker.example" in rebound.text
    assert httpx.get(webserver, headers={"Host": "attacker.example"}, timeout=10).status_code == 403
    other_site = httpx.post(
        f"{webserver}/graphql",
        json={"query": MUTATION},
        headers={"Origin": "https://attacker.example"},
        timeout=10,
    )
    assert other_site.status_code == 403 and "another site" in other_site.text


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
def test_a_run_launched_through_graphql_cannot_set_the_reward_cap(webserver: str) -> None:
    params = {
        "selector": {
            "repositoryLocationName": "marketplace",
            "repositoryName": "__repository__",
            "jobName": "evaluation_job",
        },
        "runConfigData": {
            "resources": {"marketplace": {"config": {"reward_max_tokens_per_contribution": 0.01}}}
        },
    }
    answer = httpx.post(
        f"{webserver}/graphql",
        json={"query": LAUNCH, "variables": {"params": params}},
        timeout=30,
    )
    launched = answer.json()["data"]["launchRun"]
    assert launched["__typename"] == "RunConfigValidationInvalid", launched
    messages = " ".join(error["message"] for error in launched["errors"])
    assert "reward_max_tokens_per_contribution" in messages


def test_host_names_and_mutations_are_read_as_a_browser_sends_them() -> None:
    assert host_name("Attacker.Example:3000") == "attacker.example"
    assert host_name("[::1]:3000") == "::1"
    assert host_name("localhost") == "localhost"
    assert is_mutation("mutation { setNuxSeen }")
    assert is_mutation("query A { version } mutation B { setNuxSeen }")
    assert is_mutation("{ version")  # unreadable: refused rather than guessed
    assert not is_mutation("query { version }")


def test_dev_starts_the_guarded_webserver_and_allows_its_bound_host() -> None:
    command = [sys.executable, "-m", "dagster_webserver", "--port", "3000", "--host", "0.0.0.0"]
    assert guarded_command(command)[:3] == [sys.executable, "-m", "cli.dagster_webserver"]
    assert guarded_command(command)[3:] == command[3:]
    daemon = [sys.executable, "-m", "dagster._daemon", "run"]
    assert guarded_command(daemon) == daemon
    assert allowed_hosts(["-h", "dagster.internal", "-p", "3000"], ["ui.example"]) == {
        "dagster.internal",
        "ui.example",
    }
    assert allowed_hosts(["--host", "0.0.0.0"], []) == set()
