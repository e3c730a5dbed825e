"""One sandboxed trainer run: its folder, the one command that starts it, and its outcome.

The one place the sandbox is defined. Every runner (`pipeline.sandbox.runner`'s plain
subprocess, the Dagster Pipes runner in `assets.trainers`) starts `SandboxRun.command`,
which runs the launcher (`pipeline/sandbox/launcher.py`: limits, empty environment, wall
clock) around bubblewrap around the harness (`pipeline/sandbox/harness.py`: the owner's
`fit`). A run folder holds:

    RUN/launch.json, status.json, stdout.txt, stderr.txt   written outside the sandbox
    RUN/box/                                               the sandbox's only writable place
        model/            the owner's folder (a copy)
        train.parquet     training frame (features and target)
        features.parquet  the benchmark's feature columns; its labels never leave the service
        job.json          entry point, target column, probabilities or labels
        predictions.npy   (classes.npy, result.json)        written by the trainer

bubblewrap (`--unshare-all`: no network, own PID/IPC/UTS/user namespaces) binds read-only
only /usr (with the /bin and /lib links), the Python install and the service's site-packages
(for a folder with requirements.txt, its own environment instead: `trainer_python`);
the box is bound read-write at its own path (so Pipes' file paths mean the same inside);
/tmp is an empty tmpfs (capped at the file-size limit; a Python install under /tmp is bound
read-only on top of it), the rest read-only. The environment is the launcher's, built from
nothing (`FIXED_ENV`, HOME=the box, and the Pipes bootstrap variables). The data folder, the
repository, /etc and /home are not there. The box is on the service's disk (in Kubernetes,
the shared volume): each file is capped by the file-size limit, not their number.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.sandbox.errors import SandboxUnavailable

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.core.config import Settings

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "launcher.py"
HARNESS = HERE / "harness.py"
# The reason an evaluation of owner code fails with where bubblewrap is not installed.
BWRAP_MISSING = "bubblewrap (bwrap) is not installed"
RUN_PREFIX = "mk-trainer-"
# The trainer's writable folder inside a run folder.
BOX = "box"
# The bootstrap variables a Pipes client sets for the child; nothing else of the service's
# environment reaches the sandbox.
PIPES_ENV = ("DAGSTER_PIPES_CONTEXT", "DAGSTER_PIPES_MESSAGES")
# One thread per numeric library: CPU time is the limit, and results stay reproducible.
FIXED_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@dataclass(frozen=True)
class SandboxLimits:
    memory_mb: int
    cpu_seconds: int
    wall_seconds: int
    file_size_mb: int

    @classmethod
    def from_settings(cls, settings: Settings) -> SandboxLimits:
        return cls(
            memory_mb=settings.trainer_memory_mb,
            cpu_seconds=settings.trainer_cpu_seconds,
            wall_seconds=settings.trainer_wall_seconds,
            file_size_mb=settings.trainer_file_size_mb,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "memory_mb": self.memory_mb,
            "cpu_seconds": self.cpu_seconds,
            "wall_seconds": self.wall_seconds,
            "file_size_mb": self.file_size_mb,
        }


@dataclass(frozen=True)
class TrainerJob:
    """What one run trains and predicts."""

    folder: Path  # the owner's folder, extracted on the service's side
    entry: str  # "module:function"
    target: str
    train: pd.DataFrame  # features and target
    features: pd.DataFrame  # the benchmark's features, same columns as train's minus target
    probabilities: bool
    # The model's own environment (its requirements.txt: pipeline.sandbox.envs); None: the
    # service's interpreter and site-packages.
    env: Path | None = None


def python_paths() -> tuple[str, list[str]]:
    """The interpreter to run inside, and the site-packages folders it imports from."""
    executable = os.path.realpath(sys.executable)
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    return executable, [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def trainer_python(env: Path | None) -> tuple[str, list[str], list[str]]:
    """The interpreter the harness runs with, the site-packages folders it adds, and the
    folders bound read-only for them: the service's own, or a model environment's (whose
    interpreter finds its own site-packages, and nothing of the service's)."""
    executable, site_dirs = python_paths()
    if env is None:
        return executable, site_dirs, site_dirs
    return str(env / "bin" / "python"), [], [str(env)]


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def require_isolation(isolation: str) -> None:
    """SandboxUnavailable unless owner code can run with the configured isolation."""
    if isolation != "none" and bwrap_path() is None:
        raise SandboxUnavailable(
            f"{BWRAP_MISSING}: owner code is not run without a sandbox "
            "(install bubblewrap, or set TRAINER_ISOLATION=none where the host is isolated "
            "otherwise; docs/sandbox.md)"
        )


def isolation_problem(isolation: str) -> str | None:
    """Why owner code cannot be sandboxed on this host, or None: bubblewrap missing, or unable
    to make its namespaces (an unprivileged container). Starts bwrap once, so a start-up check
    (`marketplace dev`) can say it before the first evaluation fails."""
    if isolation == "none":
        return None
    bwrap = bwrap_path()
    if bwrap is None:
        return BWRAP_MISSING
    probe = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"]
    try:
        done = subprocess.run(
            probe, env={"PATH": "/usr/bin:/bin"}, capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap (bwrap) could not be started: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        why = said[-1] if said else f"exit code {done.returncode}"
        return f"bubblewrap (bwrap) cannot make its sandbox here: {why}"
    return None


def _ro_binds(executable: str, site_dirs: Sequence[str]) -> list[str]:
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "sbin"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    prefixes = [os.path.realpath(sys.base_prefix), os.path.dirname(executable), *site_dirs]
    for prefix in dict.fromkeys(prefixes):
        if not prefix.startswith("/usr/"):
            args += ["--ro-bind", prefix, prefix]
    return args


def sandbox_command(
    box: Path, isolation: str, tmp_bytes: int, env: Path | None = None
) -> list[str]:
    """The command the launcher starts: the harness, inside bubblewrap unless isolation=none."""
    executable, site_dirs, ro_dirs = trainer_python(env)
    harness = [executable, "-I", str(box / "harness.py"), str(box), *site_dirs]
    if isolation == "none":
        return harness
    require_isolation(isolation)
    return [
        str(bwrap_path()),
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        # /tmp lives in memory: its size is capped like a file. Mounted before the binds, so a
        # Python install under /tmp (a virtualenv made there, a test's linked `.venv`) is bound
        # on top of it instead of hidden under it.
        "--size",
        str(tmp_bytes),
        "--tmpfs",
        "/tmp",
        *_ro_binds(python_paths()[0], ro_dirs),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--bind",
        str(box),
        str(box),
        # The root bwrap builds (a tmpfs holding the mount points) read-only too: the box
        # and /tmp are the only writable places.
        "--remount-ro",
        "/",
        "--chdir",
        str(box),
        *harness,
    ]


class SandboxRun:
    """A run folder prepared for one trainer run; `close()` removes it."""

    def __init__(
        self, job: TrainerJob, limits: SandboxLimits, isolation: str, root: Path | None = None
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=root)).resolve()
        self.box = self.dir / BOX
        self.limits = limits
        self.job = job
        try:
            self._fill(isolation)
        except BaseException:
            self.close()
            raise

    def _fill(self, isolation: str) -> None:
        self.box.mkdir()
        shutil.copytree(self.job.folder, self.box / "model", symlinks=False)
        shutil.copyfile(HARNESS, self.box / "harness.py")
        self.job.train.to_parquet(self.box / "train.parquet", index=False)
        self.job.features.to_parquet(self.box / "features.parquet", index=False)
        job = {
            "entry": self.job.entry,
            "target": self.job.target,
            "probabilities": self.job.probabilities,
        }
        (self.box / "job.json").write_text(json.dumps(job))
        launch: dict[str, Any] = {
            "command": sandbox_command(
                self.box, isolation, self.limits.file_size_mb * 1024 * 1024, self.job.env
            ),
            "cwd": str(self.box),
            "env": {**FIXED_ENV, "HOME": str(self.box)},
            "pass_env": list(PIPES_ENV),
            "limits": self.limits.as_dict(),
        }
        (self.dir / "launch.json").write_text(json.dumps(launch))

    @property
    def command(self) -> list[str]:
        """The launcher's command line: what every runner starts."""
        return [os.path.realpath(sys.executable), "-I", str(LAUNCHER), str(self.dir)]

    @property
    def messages_path(self) -> Path:
        """Where a Pipes message writer in the sandbox writes (the box, seen at the same path)."""
        return self.box / "pipes-messages.jsonl"

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
