"""Model environments in the operator commands: installed by `models add`, shown by `models
list`, pruned by `models prune-envs` and at `serve`/`dev` start (docs/sandbox.md)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from pipeline.core.config import Settings, get_settings
from pipeline.models.environments import install_for_folder, prune_environments
from pipeline.sandbox.envs import MB, Environment

if TYPE_CHECKING:
    from pipeline.core.tables import Model
    from pipeline.models.registry import ModelFolder


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


def environment_lines(model: Model) -> list[str]:
    """`models list`'s view of a model's environment: its key, size and packages."""
    if model.trainer_env is None:
        return []
    size = (model.trainer_env_bytes or 0) / MB
    packages = ", ".join(model.trainer_env_packages or [])
    return [f"\tenvironment {model.trainer_env} ({size:.1f} MB): {packages}"]


def prune_at_start(settings: Settings, command: str) -> None:
    """Remove unused environments when a server starts; a failure is a warning, never fatal."""
    from pipeline.bootstrap import Services

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
    from pipeline.bootstrap import Services, prepare_store

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
