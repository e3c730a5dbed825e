"""Models' environments around registration: installed before the model is stored, archived for
other hosts, and removed once no model uses them.

`marketplace models add DIR` installs the folder's environment first (`install_for_folder`,
slow the first time, found the next), then stores the model in one transaction with the
environment's key, size and packages; a refusal stores nothing. Where trainers run on other
hosts (an S3 object store, Kubernetes trainer pods: `archives_needed`), the environment's
archive goes to the object store first (`pipeline.sandbox.env_archives`); one left by a refused
transaction is removed with its environment by the next pruning.

Environments no model uses are removed (`prune_environments`): the one a re-registration
replaced, right after it (`remove_if_unused`); all of them at `marketplace serve` and `dev`
start and with `marketplace models prune-envs`. One touched within the install time limit
(plus a margin) is left: a registration of the same requirements may be about to use it.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select

from pipeline.core.tables import Model
from pipeline.sandbox.env_archives import archive_key, keep_archive
from pipeline.sandbox.envs import (
    BUILD_PREFIX,
    ENV_INFO,
    Environment,
    EnvLimits,
    environment_dir,
    install_environment,
    tree_bytes,
)

if TYPE_CHECKING:
    from pipeline.core.config import Settings
    from pipeline.core.db import Database
    from pipeline.models.definitions import ModelFolder
    from pipeline.store.objectstore import ObjectStore

# Beyond the install time limit: how long a just-touched environment is kept from pruning.
PRUNE_MARGIN_SECONDS = 300


def install_for_folder(folder: ModelFolder, settings: Settings) -> Environment | None:
    """The environment of the folder's requirements (installed, or found); None without any."""
    if folder.requirements is None:
        return None
    limits = EnvLimits.from_settings(settings)
    return install_environment(folder.requirements, settings.envs_dir, limits)


def archives_needed(settings: Settings) -> bool:
    """Whether trainers may run on a host other than the registering one."""
    return settings.uses_s3 or settings.trainer_pipes_client == "k8s"


def store_archive(store: ObjectStore, settings: Settings, environment: Environment) -> None:
    """Keep the environment's archive in the object store where other hosts need it."""
    if archives_needed(settings):
        key = environment.sha256
        keep_archive(store, environment_dir(settings.envs_dir, key), key)


def environments_in_use(db: Database) -> set[str]:
    with db.session() as session:
        keys = session.scalars(select(Model.trainer_env).where(Model.trainer_env.is_not(None)))
        return {key for key in keys if key}


def _touched_at(path: Path) -> float:
    try:
        return max((path / ENV_INFO).stat().st_mtime, path.stat().st_mtime)
    except OSError:
        return path.stat().st_mtime if path.exists() else 0.0


def _remove(store: ObjectStore, root: Path, key: str) -> None:
    shutil.rmtree(environment_dir(root, key), ignore_errors=True)
    store.delete(archive_key(key))


def remove_if_unused(
    db: Database, store: ObjectStore, settings: Settings, key: str | None, since: float
) -> bool:
    """Remove the environment `key` (a re-registration replaced it) unless a model uses it or a
    registration touched it after `since` (a time.time())."""
    if key is None or key in environments_in_use(db):
        return False
    if _touched_at(environment_dir(settings.envs_dir, key)) > since:
        return False
    _remove(store, settings.envs_dir, key)
    return True


@dataclass(frozen=True)
class Pruned:
    removed: list[str]
    freed_bytes: int


def prune_environments(
    db: Database, store: ObjectStore, settings: Settings, *, grace_seconds: float | None = None
) -> Pruned:
    """Remove the environments on this host that no model uses (and their archives), and
    installs left half-done by a killed process; each only once untouched for the grace."""
    grace = (
        settings.trainer_env_install_seconds + PRUNE_MARGIN_SECONDS
        if grace_seconds is None
        else grace_seconds
    )
    used = environments_in_use(db)
    cutoff = time.time() - grace
    removed: list[str] = []
    freed = 0
    for root in environment_roots(settings):
        for child in sorted(root.iterdir()):
            if child.name in used or _touched_at(child) > cutoff:
                continue
            if child.name.startswith(BUILD_PREFIX) or (child / ENV_INFO).is_file():
                freed += tree_bytes([child])
                if child.name.startswith(BUILD_PREFIX):
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    _remove(store, root, child.name)
                removed.append(child.name)
    return Pruned(removed, freed)


def environment_roots(settings: Settings) -> list[Path]:
    """Where this host keeps environments: its data folder's, and with Kubernetes trainer pods
    the shared volume's (where run workers unpack them), when mounted here."""
    roots = [settings.envs_dir]
    if settings.trainer_pipes_client == "k8s":
        roots.append(settings.trainer_k8s_volume_mount / "envs")
    return [root for root in roots if root.is_dir()]


__all__ = [
    "Pruned",
    "archives_needed",
    "install_for_folder",
    "prune_environments",
    "remove_if_unused",
    "store_archive",
]
