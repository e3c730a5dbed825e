"""What `marketplace dev` adds for a person at a terminal: short waits, quiet logs, a banner.

- Evaluation starts within seconds: the debounce window defaults to `DEV_DEBOUNCE_SECONDS`
  and the arrival sensor reads its queue every `DEV_ARRIVAL_POLL_SECONDS` (production keeps
  the spec's 300 s and 30 s). An environment variable or `--debounce-seconds` wins.
- Only what an operator needs is printed: warnings and errors, one line per pipeline step of
  a run, and the banner; no request log, no Dagster DEBUG events, no library chatter.
- Where owner code cannot be sandboxed (no bubblewrap), one warning says so at start, before
  the demo's loan-default model fails its first evaluation.
- Once the API and the Dagster UI answer, one screen tells where they are, how to get an admin
  token and how to try the demo (the README's "Quick start").
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from cli.client import DEFAULT_URL
from pipeline.core.config import Settings

DEBOUNCE_VARIABLE = "EVALUATION_DEBOUNCE_WINDOW_SECONDS"
POLL_VARIABLE = "ARRIVAL_POLL_INTERVAL_SECONDS"
DEV_DEBOUNCE_SECONDS = 10
DEV_ARRIVAL_POLL_SECONDS = 5
READY_TIMEOUT_SECONDS = 180.0
# `dagster dev` warns that it is superseded by `dg dev` (the dagster-dg package, not installed);
# the message is for Dagster's own users, not for ours.
DAGSTER_WARNING_FILTER = "ignore:Function `dev_command` is superseded"
RULE = "─" * 78


def dev_settings_environment(
    environ: Mapping[str, str], debounce_seconds: int | None
) -> dict[str, str]:
    """The variables `marketplace dev` sets before anything reads the settings.

    `--debounce-seconds` wins over EVALUATION_DEBOUNCE_WINDOW_SECONDS, which wins over the
    dev default; ARRIVAL_POLL_INTERVAL_SECONDS likewise over its dev default.
    """
    values: dict[str, str] = {}
    if debounce_seconds is not None:
        values[DEBOUNCE_VARIABLE] = str(debounce_seconds)
    elif DEBOUNCE_VARIABLE not in environ:
        values[DEBOUNCE_VARIABLE] = str(DEV_DEBOUNCE_SECONDS)
    if POLL_VARIABLE not in environ:
        values[POLL_VARIABLE] = str(DEV_ARRIVAL_POLL_SECONDS)
    return values


def sandbox_warning(settings: Settings) -> str | None:
    """The start-up warning where owner code cannot be sandboxed here (no bubblewrap, or one
    that cannot make its namespaces): the demo's loan-default would then never be evaluated."""
    from pipeline.sandbox.runs import isolation_problem

    if settings.trainer_pipes_client != "subprocess":
        return None  # each run is a Kubernetes pod: the pod is the sandbox
    problem = isolation_problem(settings.trainer_isolation)
    if problem is None:
        return None
    return (
        f"marketplace dev: warning: {problem}: evaluations of models trained by their owner's "
        "code (the demo's loan-default) will fail with this reason and give their "
        "contributions back; install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) "
        "or see docs/sandbox.md"
    )


def quiet_dagster_environment(env: dict[str, str]) -> None:
    """Environment of the Dagster processes, without the warnings that are not ours."""
    given = env.get("PYTHONWARNINGS")
    env["PYTHONWARNINGS"] = f"{given},{DAGSTER_WARNING_FILTER}" if given else DAGSTER_WARNING_FILTER


def _shell_prefix() -> str:
    """How this terminal's `marketplace` is reached from a second one."""
    if sys.prefix == sys.base_prefix:
        return ""
    venv = Path(sys.prefix)
    try:
        shown = os.path.relpath(venv)
    except ValueError:
        shown = str(venv)
    return f". {shlex.quote(shown)}/bin/activate"


def dev_banner(
    settings: Settings,
    *,
    host: str,
    port: int,
    dagster_port: int,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The one-screen banner printed when both services answer."""
    environ = os.environ if environ is None else environ
    shown_host = "127.0.0.1" if host in {"0.0.0.0", "::", ""} else host
    api = f"http://{shown_host}:{port}"
    lines = [
        RULE,
        f" marketplace dev is ready{'(Ctrl-C stops both)':>54}",
        *_service_lines(settings, api, f"http://{shown_host}:{dagster_port}"),
        *_second_terminal_lines(settings, api, environ),
        RULE,
    ]
    return "\n".join(lines)


def _service_lines(settings: Settings, api: str, dagster_ui: str) -> list[str]:
    """Where the services are, where the data is, and how soon evaluation starts."""
    store = "PostgreSQL" if settings.database_url else "SQLite"
    objects = (
        f"bucket {settings.service_dataset_bucket}" if settings.uses_s3 else "local object store"
    )
    window = settings.evaluation_debounce_window_seconds
    poll = settings.arrival_poll_interval_seconds
    return [
        f"   API          {api}   (docs {api}/docs)",
        f"   Web form     {api}/models",
        f"   Dagster UI   {dagster_ui}",
        f"   Data         {settings.data_dir} ({store}, {objects})",
        f"   Evaluation   debounce window {window} s, arrival sensor every {poll} s",
        "                (production: 300 s and 30 s; --debounce-seconds or",
        f"                {DEBOUNCE_VARIABLE} to change)",
        _settlement_line(settings),
    ]


def _settlement_line(settings: Settings) -> str:
    """Where rewards settle (docs/settlement.md), or how to turn settlement on."""
    if settings.settlement_rpc_url is None:
        return "   Settlement   off: no anvil (install Node and npm, then `make contracts`)"
    host = settings.settlement_rpc_url.split("//", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    return f"   Settlement   chain {settings.settlement_chain_id} at {host}"


def _second_terminal_lines(settings: Settings, api: str, environ: Mapping[str, str]) -> list[str]:
    """How to reach this server from a second terminal: credentials, then the demo."""
    same_env = [
        f"{name}={shlex.quote(environ[name])}"
        for name in ("MARKETPLACE_DATA_DIR", "DATABASE_URL")
        if environ.get(name)
    ]
    token_env = " ".join(same_env) + " " if same_env else ""
    activate = _shell_prefix()
    lines = [" In a second terminal, in this folder:"]
    if activate:
        lines.append(f"   {activate}")
    if api != DEFAULT_URL:  # `marketplace` reaches the default URL without being told
        lines.append(f"   export MARKETPLACE_URL={api}")
    if settings.admin_token is not None:
        lines.append(
            f"   export MARKETPLACE_ADMIN_TOKEN=…   # the ADMIN_TOKEN this server runs with "
            f"(user {settings.admin_user_id})"
        )
    else:
        lines.append(
            f"   export MARKETPLACE_ADMIN_TOKEN=$({token_env}marketplace token "
            f"--user {settings.admin_user_id} --admin | tail -1)"
        )
    if environ.get("JWT_SECRET"):
        lines.append("   (`marketplace token` needs this server's JWT_SECRET in its environment)")
    lines += [
        " Try the demo (README, Quick start):",
        "   export MARKETPLACE_API_KEY=$(marketplace keys create --name demo "
        "--service-id platform --scope benchmarks:write | tail -1)",
        "   marketplace demo-data demo",
        "   marketplace upload 1 demo/benchmark.csv",
        f"   export MARKETPLACE_TOKEN=$({token_env}marketplace token --user alice | tail -1)",
        "   marketplace contribute 1 demo/contribution.csv --manifest demo/manifest.json --wait",
    ]
    return lines


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def announce_when_ready(
    urls: list[str],
    banner: str,
    *,
    timeout: float = READY_TIMEOUT_SECONDS,
    answers: Callable[[str], bool] = _answers,
    write: Callable[[str], None] | None = None,
) -> threading.Thread:
    """Print `banner` once every URL answers 200 (checked from a daemon thread)."""

    def emit(text: str) -> None:
        if write is not None:
            write(text)
        else:
            print(text, flush=True)

    def wait() -> None:
        deadline = time.monotonic() + timeout
        pending = list(urls)
        while pending and time.monotonic() < deadline:
            pending = [url for url in pending if not answers(url)]
            if pending:
                time.sleep(0.5)
        if pending:
            emit(f"marketplace dev: no answer from {', '.join(pending)} within {timeout:g} s")
        else:
            emit(banner)

    thread = threading.Thread(target=wait, name="dev-banner", daemon=True)
    thread.start()
    return thread


class _OnlyRevisionChanges(logging.Filter):
    """Alembic's migration logger, keeping only the line that says a revision was applied."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return record.getMessage().startswith(("Running upgrade", "Running downgrade"))


class _CollectedRevisions(logging.Filter):
    """Alembic's "Running upgrade A -> B, …" lines, kept as their revisions, not printed."""

    def __init__(self) -> None:
        super().__init__()
        self.revisions: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.levelno < logging.WARNING and message.startswith("Running upgrade"):
            self.revisions.append(message.split("->", 1)[1].split(",", 1)[0].strip())
            return False
        return True


@contextmanager
def migrations_summarized(write: Callable[[str], None] | None = None) -> Iterator[None]:
    """One line for the migrations applied in the block (a fresh store applies them all)
    instead of one per revision."""
    collected = _CollectedRevisions()
    migration = logging.getLogger("alembic.runtime.migration")
    migration.addFilter(collected)
    try:
        yield
    finally:
        migration.removeFilter(collected)
    if collected.revisions:
        count = len(collected.revisions)
        line = (
            f"marketplace dev: database migrated to revision {collected.revisions[-1]} "
            f"({count} migration{'s' if count != 1 else ''})"
        )
        (write or (lambda text: print(text, flush=True)))(line)


def quiet_library_loggers() -> None:
    """Drop start-up chatter of libraries; their warnings and errors still show."""
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    migration = logging.getLogger("alembic.runtime.migration")
    if not any(isinstance(f, _OnlyRevisionChanges) for f in migration.filters):
        migration.addFilter(_OnlyRevisionChanges())
    logging.getLogger("presidio-analyzer").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # In the API the upload's own line reports its PII scan; the scanner's would repeat it
    # (Dagster's runs, other processes, keep it as their PII step's line).
    logging.getLogger("pipeline.checks.pii_scan").setLevel(logging.WARNING)
