"""Operator subcommands: serve, dev, db upgrade, models add/list/accepted, token."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from pipeline.config import Settings, get_settings
from pipeline.db import Database

REPO_ROOT = Path(__file__).resolve().parent.parent


def _settings() -> Settings:
    return get_settings()


def cmd_db_upgrade(_: argparse.Namespace) -> int:
    from pipeline.migrate import upgrade

    settings = _settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url)
    print("database is at the latest revision")
    return 0


def cmd_models_add(args: argparse.Namespace) -> int:
    from pipeline.bootstrap import prepare_store
    from pipeline.registry import load_definition, register_model

    settings = _settings()
    prepare_store(settings)
    definition = load_definition(Path(args.file))
    db = Database.from_settings(settings)
    with db.session() as session:
        model = register_model(session, definition)
        model_id = model.id
    print(f"registered model {definition.name!r}")
    print(model_id)
    return 0


def cmd_models_list(_: argparse.Namespace) -> int:
    from pipeline.bootstrap import prepare_store
    from pipeline.registry import list_models

    settings = _settings()
    prepare_store(settings)
    db = Database.from_settings(settings)
    with db.session() as session:
        for model in list_models(session):
            print(f"{model.id}\t{model.name}\t{model.task_type}\ttarget={model.target_column}")
    return 0


def cmd_models_accepted(args: argparse.Namespace) -> int:
    """Audit of a model's training data: accepted versions, who contributed them, their shares."""
    import json

    from pipeline.bootstrap import prepare_store
    from pipeline.ledger import accepted_data

    settings = _settings()
    prepare_store(settings)
    audit = accepted_data(Database.from_settings(settings), args.model_id)
    if args.json:
        print(json.dumps(audit, indent=2))
        return 0
    print("version\tjob\tsubmitter\trows\tshare %\tpool %\tinterval %\ttokens\taccepted at")
    for v in audit["versions"]:
        interval = v.get("interval")
        print(
            "\t".join(
                [
                    v["datasetVersion"],
                    v["jobId"],
                    v["submitter"],
                    str(v["valuedRows"] if v["valuedRows"] is not None else v["rows"]),
                    _number(v.get("sharePct")),
                    _number(v.get("poolPct")),
                    f"[{interval['low']:+.2f}, {interval['high']:+.2f}]" if interval else "",
                    _number(v["tokens"]),
                    v["acceptedAt"] or "",
                ]
            )
        )
    print(f"{len(audit['versions'])} accepted versions, {audit['rows']} rows")
    return 0


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def cmd_token(args: argparse.Namespace) -> int:
    from pipeline.sessions import issue_token

    settings = _settings()
    token = issue_token(settings, args.user, admin=args.admin, ttl_seconds=args.ttl)
    print(token)
    return 0


def _serve_api(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    from api.app import create_app

    uvicorn.run(create_app(settings), host=host, port=port, log_level="info")


def cmd_serve(args: argparse.Namespace) -> int:
    from pipeline.bootstrap import prepare_store

    settings = _settings()
    prepare_store(settings)
    _serve_api(settings, args.host, args.port)
    return 0


def render_dagster_yaml(text: str, settings: Settings) -> str:
    """The instance config with SCHEDULER_MAX_CONCURRENT as the evaluation tag's run limit.

    Dagster reads `tag_concurrency_limits[].limit` as a plain integer (no `{env: ...}`), so the
    value is written into the copy that goes to DAGSTER_HOME.
    """
    import yaml

    from assets.partitions import TAG_CONCURRENCY

    config = yaml.safe_load(text) or {}
    runs = config.setdefault("concurrency", {}).setdefault("runs", {})
    limits = runs.get("tag_concurrency_limits") or []
    entry = next((item for item in limits if item.get("key") == TAG_CONCURRENCY), None)
    if entry is None:
        entry = {"key": TAG_CONCURRENCY}
        limits.append(entry)
    entry["limit"] = settings.scheduler_max_concurrent
    runs["tag_concurrency_limits"] = limits
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


def dagster_environment(settings: Settings) -> dict[str, str]:
    """Environment for Dagster processes: DAGSTER_HOME with the repo's dagster.yaml in it."""
    env = dict(os.environ)
    home = Path(env.get("DAGSTER_HOME") or settings.dagster_home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    source = REPO_ROOT / ("dagster.postgres.yaml" if settings.dagster_pg_url else "dagster.yaml")
    rendered = render_dagster_yaml(source.read_text(), settings)
    (home / "dagster.yaml").write_text(rendered)
    if settings.dagster_pg_url:
        env["DAGSTER_PG_URL"] = dagster_storage_url(settings.dagster_pg_url)
    env["DAGSTER_HOME"] = str(home)
    env.setdefault("MARKETPLACE_DATA_DIR", str(settings.data_dir))
    return env


def cmd_dev(args: argparse.Namespace) -> int:
    from pipeline.bootstrap import prepare_store

    settings = _settings()
    prepare_store(settings)
    env = dagster_environment(settings)
    command = [
        sys.executable, "-m", "dagster", "dev",
        "-w", str(REPO_ROOT / "workspace.yaml"),
        "-h", args.host, "-p", str(args.dagster_port),
    ]  # fmt: skip
    # Its own session, so Ctrl-C reaches it once, from us, after the API has stopped.
    dagster = subprocess.Popen(command, env=env, cwd=REPO_ROOT, start_new_session=True)
    print(
        f"Dagster UI on http://{args.host}:{args.dagster_port} (DAGSTER_HOME={env['DAGSTER_HOME']})"
    )
    try:
        _serve_api(settings, args.host, args.port)
    finally:
        if dagster.poll() is None:
            os.killpg(dagster.pid, signal.SIGINT)
            try:
                dagster.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(dagster.pid, signal.SIGKILL)
                dagster.wait()
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = sub.add_parser("serve", help="run the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(handler=cmd_serve)

    dev = sub.add_parser("dev", help="run the HTTP API and the Dagster UI with its daemon")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.add_argument("--dagster-port", type=int, default=3000)
    dev.set_defaults(handler=cmd_dev)

    db = sub.add_parser("db", help="database maintenance")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("upgrade", help="apply migrations").set_defaults(handler=cmd_db_upgrade)

    models = sub.add_parser("models", help="model registry")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    add = models_sub.add_parser("add", help="register a model from a JSON or YAML file")
    add.add_argument("file")
    add.set_defaults(handler=cmd_models_add)
    models_sub.add_parser("list", help="list models").set_defaults(handler=cmd_models_list)
    accepted = models_sub.add_parser(
        "accepted", help="audit a model's accepted training data (versions, submitters, shares)"
    )
    accepted.add_argument("model_id", type=int, metavar="MODEL_ID")
    accepted.add_argument("--json", action="store_true", help="print the audit as JSON")
    accepted.set_defaults(handler=cmd_models_accepted)

    token = sub.add_parser("token", help="print a session token (last line)")
    token.add_argument("--user", required=True)
    token.add_argument("--admin", action="store_true", help="also valid as an admin token")
    token.add_argument("--ttl", type=int, default=None, help="lifetime in seconds")
    token.set_defaults(handler=cmd_token)
