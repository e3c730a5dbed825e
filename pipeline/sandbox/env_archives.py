"""Environments carried to other hosts: one archive per environment in the object store, keyed
by its hash, unpacked (never installed) where a trainer runs.

Where evaluation runs on another host than registration (an S3 object store; the Kubernetes
trainer pods), registration also stores `envs/{sha256}.tar`. `ensure_environment` gives the
step an environment on its own host: the one already unpacked, or the archive unpacked beside
the others (a private folder renamed into place, as an install is). Nothing is resolved or
downloaded from a package index while evaluating.

The archive leaves out the interpreter links (`bin/python*`), which point at the service's
interpreter by absolute path; unpacking makes them again, after checking that the environment
was made for this very interpreter. Everything else is extracted with tarfile's `data` filter
(no absolute paths, no `..`, no link out of the folder).
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.sandbox.envs import (
    BUILD_PREFIX,
    ENV_INFO,
    environment_dir,
    interpreter,
    read_environment,
)
from pipeline.sandbox.errors import TrainerFailed
from pipeline.sandbox.requirements import service_python

if TYPE_CHECKING:
    from pipeline.store.objectstore import ObjectStore

VERSION_LINK = f"bin/python{sys.version_info[0]}.{sys.version_info[1]}"
INTERPRETER_LINKS = ("bin/python", "bin/python3", VERSION_LINK)


def archive_key(sha256: str) -> str:
    return f"envs/{sha256}.tar"


def pack_environment(env_dir: Path, out: Path) -> None:
    """The environment as a tar at `out`, interpreter links left out."""

    def without_links(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        relative = info.name.split("/", 1)[1] if "/" in info.name else ""
        return None if relative in INTERPRETER_LINKS else info

    # Not compressed: gzip took 20 times as long (10 CPU seconds for pandas, numpy and pyarrow)
    # to save two thirds of the bytes, at every registration and every unpacking.
    with tarfile.open(out, mode="w") as tar:
        tar.add(env_dir, arcname="env", filter=without_links)


def _link_interpreter(env_dir: Path) -> None:
    bin_dir = env_dir / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in INTERPRETER_LINKS:
        link = env_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
    (bin_dir / "python").symlink_to(os.path.realpath(sys.executable))
    for name in INTERPRETER_LINKS[1:]:
        (env_dir / name).symlink_to("python")


def unpack_environment(archive: Path, root: Path, sha256: str) -> Path:
    """Unpack an environment's archive to `root/sha256`; TrainerFailed if it is not the one
    asked for or was made for another interpreter."""
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{sha256[:12]}-", dir=root))
    try:
        with tarfile.open(archive, mode="r:") as tar:
            tar.extractall(work, filter="data")
        env = work / "env"
        found = read_environment(env)
        if found is None or found.sha256 != sha256:
            raise TrainerFailed(
                "the model's environment archive is not the one registered",
                f"{archive_key(sha256)} does not hold environment {sha256}",
            )
        if found.python != service_python():
            raise TrainerFailed(
                "the model's environment was made for another Python",
                f"environment {sha256[:12]} was made for {found.python}; this host runs "
                f"{service_python()}: register the model's folder again",
            )
        _link_interpreter(env)
        final = environment_dir(root, sha256)
        try:
            env.rename(final)
        except OSError:  # another step unpacked it first
            if read_environment(final) is None:
                raise
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ensure_environment(store: ObjectStore, root: Path, sha256: str) -> Path:
    """The environment `sha256` on this host, unpacked from its archive if it is not here yet."""
    here = environment_dir(root, sha256)
    found = read_environment(here)
    if found is not None and interpreter(here).exists():
        if found.python != service_python():
            raise TrainerFailed(
                "the model's environment was made for another Python",
                f"environment {sha256[:12]} was made for {found.python}; this host runs "
                f"{service_python()}: register the model's folder again",
            )
        return here
    key = archive_key(sha256)
    if not store.exists(key):
        raise TrainerFailed(
            "the model's environment is missing",
            f"environment {sha256[:12]} is neither on this host ({here}) nor in the object "
            f"store ({key}): register the model's folder again",
        )
    with store.local_path(key) as path:
        return unpack_environment(path, root, sha256)


def keep_archive(store: ObjectStore, env_dir: Path, sha256: str) -> None:
    """Store the environment's archive unless it is there already."""
    key = archive_key(sha256)
    if store.exists(key):
        return
    with tempfile.TemporaryDirectory(prefix="mk-env-archive-") as tmp:
        out = Path(tmp) / "env.tar"
        pack_environment(env_dir, out)
        store.put_file(key, out)


__all__ = [
    "ENV_INFO",
    "archive_key",
    "ensure_environment",
    "keep_archive",
    "pack_environment",
    "unpack_environment",
]
