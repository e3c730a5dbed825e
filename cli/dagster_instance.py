"""The Dagster instance `marketplace dev` starts: its folder, its dagster.yaml and its
environment.

The repository's dagster.yaml (or dagster.postgres.yaml) is copied into DAGSTER_HOME with the
settings written in, since Dagster reads some values only as plain numbers.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from pipeline.core.config import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent


def render_dagster_yaml(text: str, settings: Settings) -> str:
    """The instance config with SCHEDULER_MAX_CONCURRENT as the evaluation tag's run limit,
    and run output at INFO unless the file sets `python_logs.python_log_level`.

    Dagster reads `tag_concurrency_limits[].limit` as a plain integer (no `{env: ...}`), so the
    value is written into the copy that goes to DAGSTER_HOME.
    """
    from assets.partitions import TAG_CONCURRENCY  # Dagster: ~0.7 s

    config = yaml.safe_load(text) or {}
    runs = config.setdefault("concurrency", {}).setdefault("runs", {})
    limits = runs.get("tag_concurrency_limits") or []
    entry = next((item for item in limits if item.get("key") == TAG_CONCURRENCY), None)
    if entry is None:
        entry = {"key": TAG_CONCURRENCY}
        limits.append(entry)
    entry["limit"] = settings.scheduler_max_concurrent
    runs["tag_concurrency_limits"] = limits
    # The console shows a run's INFO lines (one per pipeline step), not its ~100 DEBUG events
    # per run; the UI's run log keeps every event either way.
    config.setdefault("python_logs", {}).setdefault("python_log_level", "INFO")
    return yaml.safe_dump(config, sort_keys=False)


def dagster_storage_url(url: str) -> str:
    """DAGSTER_PG_URL with the psycopg2 driver, which dagster-postgres needs.

    SQLAlchemy 2.1 maps a bare `postgresql://` to psycopg 3, whose server-side parameters break
    dagster-postgres' `NOTIFY run_events, :id` statement.
    """
    scheme, sep, rest = url.partition("://")
    if sep and scheme in {"postgres", "postgresql", "postgresql+psycopg"}:
        return f"postgresql+psycopg2://{rest}"
    return url


def dagster_home(settings: Settings) -> Path:
    """The Dagster instance's folder: DAGSTER_HOME, else the one in the data dir."""
    return Path(os.environ.get("DAGSTER_HOME") or settings.dagster_home).resolve()


def dagster_environment(settings: Settings) -> dict[str, str]:
    """Environment for Dagster processes: DAGSTER_HOME with the repo's dagster.yaml in it."""
    env = dict(os.environ)
    home = dagster_home(settings)
    home.mkdir(parents=True, exist_ok=True)
    source = REPO_ROOT / ("dagster.postgres.yaml" if settings.dagster_pg_url else "dagster.yaml")
    rendered = render_dagster_yaml(source.read_text(), settings)
    (home / "dagster.yaml").write_text(rendered)
    if settings.dagster_pg_url:
        env["DAGSTER_PG_URL"] = dagster_storage_url(settings.dagster_pg_url)
    env["DAGSTER_HOME"] = str(home)
    env.setdefault("MARKETPLACE_DATA_DIR", str(settings.data_dir))
    return env
