"""Operator subcommands: serve, dev, db upgrade, models add/list/set-owner/accepted, token."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from cli import model_folders
from cli.dagster_instance import REPO_ROOT, dagster_environment
from cli.devmode import (
    announce_when_ready,
    dev_banner,
    dev_settings_environment,
    migrations_summarized,
    quiet_dagster_environment,
    sandbox_warning,
)
from cli.model_folders import cmd_models_add, owner_from_args, owner_text
from cli.processes import SupervisedTree, serve_app, serve_workers, signals_noted
from pipeline.core.config import Settings, get_settings
from pipeline.core.tables import Model
from pipeline.models.definitions import model_recipe
from pipeline.models.registry import find_model, list_models, model_owner, set_model_owner
from pipeline.rewards.ledger import accepted_data

# A few imports stay inside the commands that need them, so that `marketplace --help` and the
# commands that do not need them start fast; each says what it costs.


def _settings() -> Settings:
    return get_settings()


def cmd_db_upgrade(_: argparse.Namespace) -> int:
    from pipeline.core.migrate import upgrade  # alembic: ~0.1 s
    from pipeline.core.store_lock import store_preparation_lock

    settings = _settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    # Every replica's init container runs this at once: one migrates, the others wait for it.
    with store_preparation_lock(url):
        upgrade(url)
    print("database is at the latest revision")
    return 0


def cmd_models_set_owner(args: argparse.Namespace) -> int:
    # alembic, pyarrow and numpy: ~0.2 s
    from pipeline.bootstrap import prepare_store
    from pipeline.services import Services

    settings = _settings()
    prepare_store(settings)
    with Services(settings) as services, services.db.session() as session:
        owner = owner_from_args(session, args.user, args.org)
        assert owner is not None  # the parser requires one of --user and --org
        model = find_model(session, args.model)
        set_model_owner(model, owner)
        model_id, name, current = model.id, model.name, model_owner(model)
    print(f"model {model_id} ({name}) is owned by {owner_text(current)}")
    return 0


def cmd_models_list(_: argparse.Namespace) -> int:
    # alembic, pyarrow and numpy: ~0.2 s
    from pipeline.bootstrap import prepare_store
    from pipeline.services import Services

    settings = _settings()
    prepare_store(settings)
    with Services(settings) as services, services.db.session() as session:
        for model in list_models(session):
            print(
                f"{model.id}\t{model.name}\t{model.task_type}\ttarget={model.target_column}"
                f"\towner={owner_text(model_owner(model))}\t{_trained_by(model)}"
            )
            if model.trainer_failure:
                lines = model.trainer_failure.splitlines()
                print(f"\ttrainer failed {lines[0]}")
                print("".join(f"\t  {line}\n" for line in lines[1:]), end="")
            for line in model_folders.environment_lines(model):
                print(line)
    return 0


def _trained_by(model: Model) -> str:
    # The owner's paired fits only when chosen: one fit is the default, and says nothing.
    fits = f"\tpaired_fits={model.paired_fits}" if model.paired_fits > 1 else ""
    if model.trainer is not None:
        return f"trainer={model.trainer}@{(model.trainer_sha256 or '')[:12]}{fits}"
    recipe = model_recipe(model)
    trained = f"recipe={recipe.describe()}" if recipe else f"estimator={model.estimator}"
    return trained + fits


def cmd_models_accepted(args: argparse.Namespace) -> int:
    """Audit of a model's training data: accepted versions, who contributed them, their shares."""
    # alembic, pyarrow and numpy: ~0.2 s
    from pipeline.bootstrap import prepare_store
    from pipeline.services import Services

    settings = _settings()
    prepare_store(settings)
    with Services(settings) as services:
        audit = accepted_data(services.db, args.model_id)
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
    from pipeline.auth.sessions import issue_token  # PyJWT with cryptography: ~20 ms

    settings = _settings()
    token = issue_token(settings, args.user, admin=args.admin, ttl_seconds=args.ttl)
    print(token)
    return 0


def _serve_api(
    settings: Settings,
    host: str,
    port: int,
    *,
    quiet: bool = False,
    on_exit: Callable[[], None] | None = None,
) -> None:
    from api.app import create_app  # FastAPI, the routers and the pipeline behind them: ~0.5 s
    from api.server import server_config

    app = create_app(settings)
    serve_app(server_config(settings, app, host=host, port=port, quiet=quiet), on_exit=on_exit)


def serve_problems(settings: Settings, workers: int) -> list[str]:
    """Why `marketplace serve` must not start with these settings (production checks)."""
    from pipeline.core.secret_strength import HOW_TO_GENERATE, weak_secrets

    problems = [f"{line}; generate one with {HOW_TO_GENERATE}" for line in weak_secrets(settings)]
    if workers > 1 and not settings.redis_url:
        problems.append(
            f"--workers {workers} needs REDIS_URL: without it every worker process counts each "
            f"key's hourly rate limit alone, so a key would get up to {workers} times its limit; "
            "set REDIS_URL=redis://host:6379/0 or run one worker"
        )
    return problems


def prepare_store_apart(settings: Settings) -> bool:
    """`prepare_store` in a child process; False when it failed (its error is on stderr).

    Registering the demo models checks their recipes against scikit-learn, which imports it and
    SciPy: about 100 MB that an API process never uses again and would keep, a quarter of an
    upload's memory budget (docs/api.md, "Benchmark upload while the bytes arrive").
    """
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(
        target=_prepare_store_logged, args=(settings,), name="prepare-store"
    )
    child.start()
    child.join()
    return child.exitcode == 0


def _prepare_store_logged(settings: Settings) -> None:
    import logging

    from pipeline.bootstrap import prepare_store

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    prepare_store(settings)


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _settings()
    problems = serve_problems(settings, args.workers)
    if problems:
        for problem in problems:
            print(f"marketplace serve: {problem}", file=sys.stderr)
        return 2
    if not prepare_store_apart(settings):
        print("marketplace serve: preparing the store failed (see above)", file=sys.stderr)
        return 1
    model_folders.prune_at_start(settings, "serve")
    if args.workers == 1:
        _serve_api(settings, args.host, args.port)
        return 0
    from api.server import server_config

    # Written once here, not raced by the workers, when JWT_SECRET is not set.
    settings.jwt_key()
    serve_workers(server_config(settings, host=args.host, port=args.port, workers=args.workers))
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    # Before the settings are first read: the API and the Dagster processes share them.
    os.environ.update(dev_settings_environment(os.environ, args.debounce_seconds))
    # A plain tcp:// dask scheduler off this host is refused in production only.
    os.environ.setdefault("MARKETPLACE_MODE", "development")
    settings = _settings()
    chain = None
    if settings.settlement_rpc_url is None:
        from cli.dev_chain import start_dev_chain

        # Before the API and Dagster read the settings: they settle on this chain.
        chain = start_dev_chain(settings.data_dir)
        if chain is not None:
            os.environ.update(chain.environment)
            get_settings.cache_clear()
            settings = _settings()
    try:
        return _run_dev(args, settings)
    finally:
        if chain is not None:
            chain.stop()


def _run_dev(args: argparse.Namespace, settings: Settings) -> int:
    # alembic, pyarrow and numpy: ~0.2 s
    from pipeline.bootstrap import prepare_store
    from pipeline.core.secret_strength import weak_secrets

    for problem in weak_secrets(settings):
        # `serve` refuses these; dev serves one person, on loopback by default.
        print(f"marketplace dev: warning: {problem} (`marketplace serve` refuses it)", flush=True)
    sandbox = sandbox_warning(settings)
    if sandbox is not None:
        print(sandbox, flush=True)
    print(
        f"marketplace dev: starting the API on :{args.port} and Dagster on :{args.dagster_port} "
        f"(debounce window {settings.evaluation_debounce_window_seconds} s)…",
        flush=True,
    )
    with migrations_summarized():
        prepare_store(settings)
    model_folders.prune_at_start(settings, "dev")
    env = dagster_environment(settings)
    quiet_dagster_environment(env)
    command = [
        # `dagster dev` with its webserver behind cli/webserver_guard.py (cli/dagster_dev.py).
        sys.executable, "-m", "cli.dagster_dev", "dev",
        "-w", str(REPO_ROOT / "workspace.yaml"),
        "-h", args.host, "-p", str(args.dagster_port),
        # The banner gives the URLs; Dagster's own INFO lines repeat every sensor tick.
        "--log-level", "warning",
    ]  # fmt: skip
    # In its own process group under a watchdog: it stops when we stop, even after a SIGKILL.
    # Started in DAGSTER_HOME: from the repository it warns that the dagster.yaml there is
    # not used.
    grace = settings.shutdown_grace_seconds
    dagster = SupervisedTree(command, env=env, cwd=Path(env["DAGSTER_HOME"]), grace=grace)
    ready_host = "127.0.0.1" if args.host in {"0.0.0.0", "::"} else args.host
    announce_when_ready(
        [
            f"http://{ready_host}:{args.port}/api/models",
            f"http://{ready_host}:{args.dagster_port}/server_info",
        ],
        dev_banner(settings, host=args.host, port=args.port, dagster_port=args.dagster_port),
    )
    try:
        # Dagster starts stopping as soon as the signal arrives, while requests drain.
        _serve_api(settings, args.host, args.port, quiet=True, on_exit=dagster.stop)
    finally:
        # A second signal while Dagster stops cuts its grace short.
        with signals_noted(lambda _sig: dagster.kill()):
            dagster.wait(timeout=grace + 5)
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = sub.add_parser("serve", help="run the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--workers",
        type=_positive,
        default=1,
        metavar="N",
        help="API worker processes on the one port (uvicorn's supervisor); N > 1 needs REDIS_URL",
    )
    serve.set_defaults(handler=cmd_serve)

    dev = sub.add_parser("dev", help="run the HTTP API and the Dagster UI with its daemon")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.add_argument("--dagster-port", type=int, default=3000)
    dev.add_argument(
        "--debounce-seconds",
        type=int,
        metavar="S",
        help="evaluation debounce window (default: EVALUATION_DEBOUNCE_WINDOW_SECONDS, else 10; "
        "`serve` and production keep the spec's 300)",
    )
    dev.set_defaults(handler=cmd_dev)

    db = sub.add_parser("db", help="database maintenance")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("upgrade", help="apply migrations").set_defaults(handler=cmd_db_upgrade)

    models = sub.add_parser("models", help="model registry")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    add = models_sub.add_parser(
        "add",
        help="register a model from a JSON or YAML file, or from a folder with model.json "
        "(or model.yaml) and the owner's training code (docs/sandbox.md); a new model is "
        "owned by the admin user (ADMIN_USER_ID) unless an owner is given",
    )
    add.add_argument("file", metavar="FILE_OR_DIR")
    owner = add.add_mutually_exclusive_group()
    owner.add_argument("--owner-user", help="user id of the owner")
    owner.add_argument("--owner-org", help="organization id or name of the owner")
    add.set_defaults(handler=cmd_models_add)
    models_sub.add_parser("list", help="list models").set_defaults(handler=cmd_models_list)
    model_folders.register(models_sub)
    set_owner = models_sub.add_parser(
        "set-owner", help="give a model to a user or an organization (who may change its benchmark)"
    )
    set_owner.add_argument("model", help="model id or name")
    new_owner = set_owner.add_mutually_exclusive_group(required=True)
    new_owner.add_argument("--user", help="user id")
    new_owner.add_argument("--org", help="organization id or name")
    set_owner.set_defaults(handler=cmd_models_set_owner)
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
