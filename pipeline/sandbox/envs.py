"""Environments of model folders' requirements: installed once with uv, keyed, sized, described.

`install_environment` makes `ROOT/KEY/` (KEY: `Requirements.env_key`) with `uv venv` and
`uv pip install --only-binary :all:` — wheels only, so no package's build script runs on the
service's host. uv reads its own settings (`uv.toml`, `UV_INDEX_URL`, `UV_FIND_LINKS`,
`UV_NO_INDEX`, ...): the operator's index, or a local wheel folder on an air-gapped host.
An environment is independent of the service's site-packages (`include-system-site-packages
= false`): it holds what the folder asks for and the harness's pins, nothing else. uv links
files from its cache (hard links where the cache is on the same filesystem), so a second
environment with the same packages costs little disk and well under a second.

The install runs in a private folder beside the others and is renamed into place when
complete, so `ROOT/KEY` exists only whole; `ENV_INFO` inside describes it. A second
registration with the same requirements finds it and installs nothing. Refused (InvalidInput,
the install removed): what uv cannot resolve or install (uv's own message), an install over
TRAINER_ENV_INSTALL_SECONDS, an environment over TRAINER_ENV_MAX_MB, or one that would bring
all of them over TRAINER_ENVS_MAX_TOTAL_MB.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import InvalidInput
from pipeline.sandbox.requirements import Requirements, service_python

if TYPE_CHECKING:
    from pipeline.core.config import Settings

MB = 1024 * 1024
ENV_INFO = ".marketplace-env.json"
BUILD_PREFIX = ".build-"
# uv's output kept in a refusal: the resolver's explanation, not pages of it.
MAX_MESSAGE_CHARS = 4000
# Variables of the service that must not steer uv or the interpreter it queries.
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "UV_PYTHON", "CONDA_PREFIX")


@dataclass(frozen=True)
class EnvLimits:
    max_bytes: int
    install_seconds: int
    total_bytes: int

    @classmethod
    def from_settings(cls, settings: Settings) -> EnvLimits:
        return cls(
            settings.trainer_env_max_mb * MB,
            settings.trainer_env_install_seconds,
            settings.trainer_envs_max_total_mb * MB,
        )


@dataclass(frozen=True)
class Environment:
    """An installed environment: its key, where it is, its size and its packages."""

    sha256: str
    python: str
    size_bytes: int
    packages: list[str]

    def describe(self) -> str:
        return f"environment {self.sha256[:12]} ({self.size_bytes / MB:.1f} MB, " + (
            f"{len(self.packages)} packages)"
        )

    @staticmethod
    def model_columns(environment: Environment | None) -> dict[str, Any]:
        """The model row's columns (`trainer_env*`; all None for a folder without requirements)."""
        if environment is None:
            return {"trainer_env": None, "trainer_env_bytes": None, "trainer_env_packages": None}
        return {
            "trainer_env": environment.sha256,
            "trainer_env_bytes": environment.size_bytes,
            "trainer_env_packages": list(environment.packages),
        }


def environment_dir(root: Path, sha256: str) -> Path:
    return root / sha256


def interpreter(env_dir: Path) -> Path:
    """The environment's Python (a link to the service's interpreter, beside its pyvenv.cfg)."""
    return env_dir / "bin" / "python"


def read_environment(env_dir: Path) -> Environment | None:
    """The environment installed at `env_dir`, or None when there is none (or not whole)."""
    try:
        data = json.loads((env_dir / ENV_INFO).read_text(encoding="utf-8"))
        return Environment(
            str(data["sha256"]), str(data["python"]), int(data["size_bytes"]), data["packages"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def tree_bytes(paths: Iterable[Path]) -> int:
    """Bytes of the regular files under `paths`, each inode once (uv's hard links are shared)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for top in paths:
        for folder, _dirs, files in os.walk(top):
            for name in files:
                try:
                    status = os.lstat(os.path.join(folder, name))
                except OSError:
                    continue
                if (status.st_dev, status.st_ino) not in seen:
                    seen.add((status.st_dev, status.st_ino))
                    total += status.st_size
    return total


def uv_binary() -> str:
    """The uv executable of the `uv` package (the wheel ships the binary)."""
    from uv import find_uv_bin

    return find_uv_bin()


def _too_slow(seconds: int) -> InvalidInput:
    return InvalidInput(
        f"requirements.txt: installing took longer than {seconds} s "
        "(TRAINER_ENV_INSTALL_SECONDS); nothing was registered"
    )


def _uv(args: list[str], cwd: Path, deadline: float, seconds: int) -> None:
    """Run uv; InvalidInput with its own message when it fails or passes the deadline."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env["UV_NO_PROGRESS"] = "1"
    # The environment is made for the service's own interpreter, never one uv would fetch.
    env["UV_PYTHON_DOWNLOADS"] = "never"
    try:
        done = subprocess.run(
            [uv_binary(), *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=max(deadline - time.monotonic(), 0.1),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise _too_slow(seconds) from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[-MAX_MESSAGE_CHARS:]
        raise InvalidInput(f"requirements.txt cannot be installed; uv says:\n{said}")


def _compile(env_dir: Path, deadline: float, seconds: int) -> None:
    """Compile the environment's bytecode now: the box mounts it read-only, and a run that
    compiled pandas or scikit-learn at each import would spend seconds of its CPU limit on it.
    After the size check, so an environment refused for its size is not compiled first.

    Compiled by the service's own interpreter (the environment's is a link to it) with no site
    processing (-S): the environment's interpreter would run its `.pth` files, which a package
    may fill with code, here, outside the box."""
    python = os.path.realpath(sys.executable)
    command = [python, "-I", "-S", "-m", "compileall", "-q", "-j", "0"]
    try:
        subprocess.run(
            [*command, str(_site_packages(env_dir))],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={"PATH": "/usr/bin:/bin"},
            timeout=max(deadline - time.monotonic(), 0.1),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise _too_slow(seconds) from None


def _site_packages(env_dir: Path) -> Path:
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return env_dir / "lib" / version / "site-packages"


def installed_packages(env_dir: Path) -> list[str]:
    """`name==version` of every distribution in the environment, sorted."""
    found = importlib.metadata.distributions(path=[str(_site_packages(env_dir))])
    return sorted({f"{d.metadata['Name']}=={d.version}" for d in found}, key=str.lower)


def _check_size(target: Path, root: Path, limits: EnvLimits) -> int:
    size = tree_bytes([target])
    if size > limits.max_bytes:
        raise InvalidInput(
            f"requirements.txt: the environment is {size / MB:.0f} MB, over the limit of "
            f"{limits.max_bytes // MB} MB (TRAINER_ENV_MAX_MB); nothing was registered"
        )
    total = tree_bytes([root])
    if total > limits.total_bytes:
        raise InvalidInput(
            f"requirements.txt: all environments would use {total / MB:.0f} MB, over the "
            f"limit of {limits.total_bytes // MB} MB (TRAINER_ENVS_MAX_TOTAL_MB); "
            "`marketplace models prune-envs` removes those no model uses"
        )
    return size


def install_environment(requirements: Requirements, root: Path, limits: EnvLimits) -> Environment:
    """The environment of `requirements` under `root`: found, or installed (module docstring)."""
    key = requirements.env_key()
    final = environment_dir(root, key)
    existing = read_environment(final)
    if existing is not None:
        # Marked as in use by a registration: pruning leaves it alone for a while
        # (pipeline.models.environments).
        os.utime(final / ENV_INFO)
        return existing
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{key[:12]}-", dir=root))
    deadline = time.monotonic() + limits.install_seconds
    try:
        target = work / "env"
        python = os.path.realpath(sys.executable)
        venv = ["venv", "--quiet", "--relocatable", "--python", python, str(target)]
        _uv(venv, work, deadline, limits.install_seconds)
        listed = work / "requirements.txt"
        listed.write_text("\n".join(requirements.install_lines()) + "\n", encoding="utf-8")
        install = ["pip", "install", "--quiet", "--python", str(interpreter(target))]
        install += ["--only-binary", ":all:", "-r", str(listed)]
        _uv(install, work, deadline, limits.install_seconds)
        _check_size(target, root, limits)
        _compile(target, deadline, limits.install_seconds)
        size = _check_size(target, root, limits)
        environment = Environment(key, service_python(), size, installed_packages(target))
        (target / ENV_INFO).write_text(json.dumps(asdict(environment)), encoding="utf-8")
        try:
            target.rename(final)
        except OSError:  # another registration of the same requirements finished first
            if read_environment(final) is None:
                raise
        return read_environment(final) or environment
    finally:
        shutil.rmtree(work, ignore_errors=True)
