"""`marketplace dev` (issue 2): API and Dagster UI start on a fresh data dir; Ctrl-C stops both."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]


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
        # Its webserver is behind the guard (cli/webserver_guard.py): a foreign Host is refused.
        foreign = httpx.get(ui.url, headers={"Host": "attacker.example"}, timeout=5)
        assert foreign.status_code == 403, foreign.text
        assert (tmp_path / "data" / "dagster" / "dagster.yaml").is_file()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            returncode = proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("marketplace dev did not stop within 40 s of Ctrl-C")
    assert returncode == 0
    ports = [api_port, dagster_port]
    from cli.anvil import anvil_binary

    if anvil_binary() is not None:  # the local chain it settled on stops with it too
        chain = json.loads((tmp_path / "data" / "dev-chain.json").read_text())
        ports.append(int(chain["SETTLEMENT_RPC_URL"].rsplit(":", 1)[1]))
        assert (tmp_path / "data" / "anvil-state.json").is_file()  # saved for the next start
    for port in ports:
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still served"


# --- dev defaults, quiet logs and the banner (issue 11) ------------------------------------


def test_dev_defaults_to_a_short_debounce_that_the_operator_can_override() -> None:
    from cli.devmode import dev_settings_environment

    assert dev_settings_environment({}, None) == {
        "EVALUATION_DEBOUNCE_WINDOW_SECONDS": "10",
        "ARRIVAL_POLL_INTERVAL_SECONDS": "5",
    }
    # An environment variable wins over the dev default, the flag over both.
    given = {"EVALUATION_DEBOUNCE_WINDOW_SECONDS": "60", "ARRIVAL_POLL_INTERVAL_SECONDS": "15"}
    assert dev_settings_environment(given, None) == {}
    assert dev_settings_environment(given, 0) == {"EVALUATION_DEBOUNCE_WINDOW_SECONDS": "0"}


def test_production_settings_keep_the_spec_debounce() -> None:
    from pipeline.core.config import Settings

    settings = Settings()
    assert settings.evaluation_debounce_window_seconds == 300
    assert settings.arrival_poll_interval_seconds == 30


def test_dev_instance_prints_runs_at_info_and_keeps_an_explicit_level(tmp_path: Path) -> None:
    import yaml

    from cli.dagster_instance import render_dagster_yaml
    from pipeline.core.config import Settings

    settings = Settings(marketplace_data_dir=tmp_path)
    rendered = yaml.safe_load(render_dagster_yaml((REPO / "dagster.yaml").read_text(), settings))
    assert rendered["python_logs"]["python_log_level"] == "INFO"
    assert rendered["python_logs"]["managed_python_loggers"] == ["pipeline"]
    explicit = "python_logs:\n  python_log_level: DEBUG\n"
    assert yaml.safe_load(render_dagster_yaml(explicit, settings))["python_logs"] == {
        "python_log_level": "DEBUG"
    }


def test_dagster_processes_drop_only_the_superseded_command_warning() -> None:
    from cli.devmode import DAGSTER_WARNING_FILTER, quiet_dagster_environment

    env = {"PYTHONWARNINGS": "error::ResourceWarning"}
    quiet_dagster_environment(env)
    assert env["PYTHONWARNINGS"] == f"error::ResourceWarning,{DAGSTER_WARNING_FILTER}"
    # The filter, as Python reads it from PYTHONWARNINGS, matches Dagster's message only.
    code = (
        "import warnings\n"
        'warnings.warn("Function `dev_command` is superseded and its usage is discouraged. '
        "Use 'dg dev' instead.\", FutureWarning)\n"
        "warnings.warn('another warning', FutureWarning)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONWARNINGS": DAGSTER_WARNING_FILTER},
        capture_output=True,
        text=True,
    )
    assert "superseded" not in done.stderr and "another warning" in done.stderr


def test_library_start_up_chatter_is_dropped_but_migrations_and_warnings_show(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from cli.devmode import quiet_library_loggers

    quiet_library_loggers()
    quiet_library_loggers()  # idempotent
    migration = logging.getLogger("alembic.runtime.migration")
    with caplog.at_level(logging.INFO):
        migration.info("Context impl SQLiteImpl.")
        migration.info("Running upgrade  -> 0001, initial schema")
        migration.warning("something odd")
        logging.getLogger("alembic.runtime.plugins").info("setup plugin x")
        logging.getLogger("presidio-analyzer").info("Loaded recognizer: EmailRecognizer")
        logging.getLogger("httpx").info("HTTP Request: GET …")
        logging.getLogger("pipeline.checks.pii_scan").info("no PII found in 4 text values")
        logging.getLogger("pipeline.intake.uploads").info("PII scan: no PII found in 4 text …")
    assert [r.getMessage() for r in caplog.records] == [
        "Running upgrade  -> 0001, initial schema",
        "something odd",
        "PII scan: no PII found in 4 text …",
    ]


def test_dev_summarizes_the_migrations_of_a_fresh_store_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from cli.devmode import migrations_summarized, quiet_library_loggers

    quiet_library_loggers()
    migration = logging.getLogger("alembic.runtime.migration")
    printed: list[str] = []
    with caplog.at_level(logging.INFO), migrations_summarized(printed.append):
        migration.info("Running upgrade  -> 0001, initial schema")
        migration.info("Running upgrade 0001 -> 0002, model owners")
        migration.warning("something odd")
    assert [r.getMessage() for r in caplog.records] == ["something odd"]
    assert printed == ["marketplace dev: database migrated to revision 0002 (2 migrations)"]
    with migrations_summarized(printed.append):
        pass  # a store already at the latest revision: nothing printed
    assert len(printed) == 1
    with caplog.at_level(logging.INFO):
        migration.info("Running upgrade 0002 -> 0003, x")  # outside `dev`: shown as before
    assert caplog.records[-1].getMessage() == "Running upgrade 0002 -> 0003, x"


def test_version_checks_without_a_result_by_design_are_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    import definitions  # noqa: F401  (defines the version checks)

    active = logging.getLogger("dagster._core.execution.plan.active")
    with caplog.at_level(logging.WARNING):
        active.warning(
            "Blocking asset check 'pii_report:no_pii' emitted no result in step 'x'; "
            "downstream step 'y' will proceed without gating on it."
        )
        active.warning(
            "Blocking asset check 'other:check' emitted no result in step 'x'; downstream …"
        )
    assert [r.getMessage()[:36] for r in caplog.records] == ["Blocking asset check 'other:check' e"]


def test_banner_names_the_urls_the_window_and_how_to_get_an_admin_token(tmp_path: Path) -> None:
    from pydantic import SecretStr

    from cli.devmode import dev_banner
    from pipeline.core.config import Settings

    settings = Settings(marketplace_data_dir=tmp_path, evaluation_debounce_window_seconds=10)
    text = dev_banner(settings, host="127.0.0.1", port=8000, dagster_port=3000, environ={})
    lines = text.splitlines()
    assert len(lines) <= 24  # one screen
    assert "   API          http://127.0.0.1:8000   (docs http://127.0.0.1:8000/docs)" in lines
    assert "   Dagster UI   http://127.0.0.1:3000" in lines
    assert "   Evaluation   debounce window 10 s, arrival sensor every 30 s" in lines
    assert (
        "   export MARKETPLACE_ADMIN_TOKEN=$(marketplace token --user admin --admin | tail -1)"
        in lines
    )
    assert "MARKETPLACE_URL" not in text  # the CLI's default address

    elsewhere = dev_banner(
        Settings(marketplace_data_dir=tmp_path, admin_token=SecretStr("s3cret-admin-token-value")),
        host="0.0.0.0",
        port=9000,
        dagster_port=9001,
        environ={"MARKETPLACE_DATA_DIR": str(tmp_path / "my data")},
    )
    assert "   export MARKETPLACE_URL=http://127.0.0.1:9000" in elsewhere
    assert "s3cret-admin-token-value" not in elsewhere  # a hint, never the secret
    assert "the ADMIN_TOKEN this server runs with (user admin)" in elsewhere
    assert f"$(MARKETPLACE_DATA_DIR='{tmp_path / 'my data'}' marketplace token --user alice" in (
        elsewhere
    )


def test_banner_says_where_rewards_settle_or_how_to_turn_settlement_on(tmp_path: Path) -> None:
    from cli.devmode import dev_banner
    from pipeline.core.config import Settings

    off = dev_banner(
        Settings(marketplace_data_dir=tmp_path), host="127.0.0.1", port=8000, dagster_port=3000
    )
    assert (
        "   Settlement   off: no anvil (install Node and npm, then `make contracts`)"
        in off.splitlines()
    )
    on = Settings(
        marketplace_data_dir=tmp_path,
        settlement_rpc_url="http://user:secret@127.0.0.1:8545/path",
        settlement_chain_id=31337,
    )
    text = dev_banner(on, host="127.0.0.1", port=8000, dagster_port=3000)
    assert "   Settlement   chain 31337 at 127.0.0.1:8545" in text.splitlines()
    assert "secret" not in text  # an RPC URL may carry a token


def test_banner_waits_until_every_service_answers() -> None:
    from cli.devmode import announce_when_ready

    calls: list[str] = []
    printed: list[str] = []

    def answers(url: str) -> bool:
        calls.append(url)
        return url == "api" or calls.count("ui") > 2

    announce_when_ready(["api", "ui"], "BANNER", answers=answers, write=printed.append).join(10)
    assert printed == ["BANNER"]
    assert calls.count("api") == 1 and calls.count("ui") == 3

    announce_when_ready(["ui"], "BANNER", timeout=0.2, answers=lambda _: False,
                        write=printed.append).join(10)  # fmt: skip
    assert printed[-1] == "marketplace dev: no answer from ui within 0.2 s"


# --- owner code needs bubblewrap (issue 17 §4) ---------------------------------------------


def test_dev_warns_at_start_where_bubblewrap_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.devmode import sandbox_warning
    from pipeline.core.config import load_settings
    from pipeline.sandbox.errors import SandboxUnavailable
    from pipeline.sandbox.runs import BWRAP_MISSING, require_isolation

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    warning = sandbox_warning(load_settings())
    assert warning is not None
    assert warning.startswith(f"marketplace dev: warning: {BWRAP_MISSING}: ")
    assert "loan-default" in warning and "apt-get install bubblewrap" in warning
    # ... the very reason each evaluation of owner code then fails with.
    with pytest.raises(SandboxUnavailable) as refused:
        require_isolation("bwrap")
    assert refused.value.summary.startswith(BWRAP_MISSING)
    # An operator who isolates the host otherwise is not warned.
    assert sandbox_warning(load_settings(trainer_isolation="none")) is None


def test_dev_warns_where_bubblewrap_cannot_make_its_namespaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As in an unprivileged container: bwrap is there, its namespaces are refused."""
    from cli.devmode import sandbox_warning
    from pipeline.core.config import load_settings

    # Outside pytest's private temp folder: as root, the probe starts bwrap as the sandbox's
    # unprivileged user, as the launcher does.
    bin_dir = Path(tempfile.mkdtemp(prefix="mk-fake-bwrap-"))
    bin_dir.chmod(0o755)
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    try:
        warning = sandbox_warning(load_settings())
    finally:
        shutil.rmtree(bin_dir)
    assert warning is not None
    assert "cannot make its sandbox here: bwrap: No permissions to create new namespace" in warning


def test_dev_does_not_warn_where_the_sandbox_works() -> None:
    from cli.devmode import sandbox_warning
    from pipeline.core.config import load_settings
    from pipeline.sandbox.runs import bwrap_path

    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    assert sandbox_warning(load_settings()) is None
