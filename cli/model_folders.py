"""Registering model folders: `models add` (the folder's environment installed first), the
owner options, environments in `models list`, `models prune-envs` and the pruning at `serve`/`dev`
start (docs/sandbox.md)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select

from pipeline.auth.orgs import find_org
from pipeline.core.config import Settings, get_settings
from pipeline.core.tables import Model
from pipeline.models.definitions import ModelFolder, load_model_path
from pipeline.models.environments import (
    install_for_folder,
    prune_environments,
    remove_if_unused,
    store_archive,
)
from pipeline.models.registry import ModelOwner, model_owner, register_model_folder
from pipeline.sandbox.envs import MB, Environment

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def install_folder_environment(folder: ModelFolder, settings: Settings) -> Environment | None:
    """The folder's environment, installed before anything is stored, with a line saying so."""
    if folder.requirements is None:
        return None
    started = time.monotonic()
    count = len(folder.requirements.lines)
    print(f"installing requirements.txt with uv ({count} requirement{'s' if count != 1 else ''})…")
    environment = install_for_folder(folder, settings)
    assert environment is not None
    print(f"{environment.describe()} ready in {time.monotonic() - started:.1f} s")
    return environment


def owner_from_args(session: Session, user: str | None, org: str | None) -> ModelOwner | None:
    """--owner-user / --owner-org as a ModelOwner (an organization by id or name), or None."""
    if org is not None:
        return ModelOwner(org_id=find_org(session, org).id)
    if user is not None:
        return ModelOwner(user_id=user)
    return None


def cmd_models_add(args: argparse.Namespace) -> int:
    # alembic, pyarrow and numpy: ~0.2 s
    from pipeline.bootstrap import prepare_store
    from pipeline.services import Services

    settings = get_settings()
    prepare_store(settings)
    path = Path(args.file)
    folder = load_model_path(path)
    definition = folder.definition
    started = time.time()
    # Installed before the transaction: a refusal stores nothing.
    environment = install_folder_environment(folder, settings)
    with Services(settings) as services:
        if environment is not None:
            # Before the transaction too: packing takes seconds, and holds no lock this way.
            store_archive(services.store, settings, environment)
        with services.db.session() as session:
            owner = owner_from_args(session, args.owner_user, args.owner_org)
            existing = session.scalar(select(Model).where(Model.name == definition.name))
            if owner is None and (existing is None or model_owner(existing) is None):
                owner = ModelOwner(user_id=settings.admin_user_id)
            replaced = existing.trainer_env if existing is not None else None
            model = register_model_folder(session, services.store, folder, owner, environment)
            model_id, current = model.id, model_owner(model)
        remove_if_unused(services.db, services.store, settings, replaced, started)
    print(f"registered model {definition.name!r}, owned by {owner_text(current)}")
    if folder.sha256 is not None:
        print(f"trainer {definition.trainer} from {path}, folder sha256 {folder.sha256}")
    print(model_id)
    return 0


def owner_text(owner: ModelOwner | None) -> str:
    return owner.describe() if owner is not None else "nobody"


def environment_lines(model: Model) -> list[str]:
    """`models list`'s view of a model's environment: its key, size and packages."""
    if model.trainer_env is None:
        return []
    size = (model.trainer_env_bytes or 0) / MB
    packages = ", ".join(model.trainer_env_packages or [])
    return [f"\tenvironment {model.trainer_env} ({size:.1f} MB): {packages}"]


def prune_at_start(settings: Settings, command: str) -> None:
    """Remove unused environments when a server starts; a failure is a warning, never fatal."""
    from pipeline.services import Services

    if not settings.envs_dir.is_dir():
        return
    try:
        with Services(settings) as services:
            pruned = prune_environments(services.db, services.store, settings)
    except Exception as exc:  # start anyway: pruning only frees disk
        warning = f"marketplace {command}: warning: pruning environments failed: {exc}"
        print(warning, file=sys.stderr)
        return
    if pruned.removed:
        print(
            f"marketplace {command}: removed {len(pruned.removed)} environments no model uses "
            f"({pruned.freed_bytes / MB:.0f} MB)"
        )


def cmd_models_prune_envs(_: argparse.Namespace) -> int:
    # alembic, pyarrow and numpy: ~0.2 s
    from pipeline.bootstrap import prepare_store
    from pipeline.services import Services

    settings = get_settings()
    prepare_store(settings)
    with Services(settings) as services:
        pruned = prune_environments(services.db, services.store, settings)
    for key in pruned.removed:
        print(f"removed {key}")
    print(f"{len(pruned.removed)} environments removed ({pruned.freed_bytes / MB:.0f} MB)")
    return 0


def register(models_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    models_sub.add_parser(
        "prune-envs",
        help="remove the environments (requirements.txt installs) no model uses any more",
    ).set_defaults(handler=cmd_models_prune_envs)
