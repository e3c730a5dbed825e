"""One sandboxed trainer run: its folder, the one command that starts it, and its outcome.

The one place the sandbox is defined. Every runner (`pipeline.sandbox.runner`'s plain
subprocess, the Dagster Pipes runner in `assets.trainers`) starts `SandboxRun.command`,
which runs the launcher (`pipeline/sandbox/launcher.py`: limits, empty environment, wall
clock) around bubblewrap around the harness (`pipeline/sandbox/harness.py`: the owner's
`fit`). A run folder holds:

    RUN/launch.json, seccomp.bpf, status.json, stdout.txt, stderr.txt   outside the sandbox
    RUN/box/                                               the sandbox's only writable place
        model/            the owner's folder (a copy)
        train.parquet     training frame (features and target)
        features.parquet  the benchmark's feature columns; its labels never leave the service
        job.json          entry point, target column, probabilities or labels
        predictions.npy   (classes.npy, result.json)        written by the trainer

bubblewrap (`--unshare-all`: no network, own PID/IPC/UTS/user namespaces) runs the harness as
an unprivileged uid with no capabilities and no right to make further user namespaces, and
binds read-only only /usr (with the /bin and /lib links), the Python install and the service's
site-packages (for a folder with requirements.txt, its own environment instead:
`trainer_python`); the box is bound read-write at its own path (so Pipes' file paths mean the same
inside); /tmp and /dev/shm are empty tmpfs (/tmp capped at the file-size limit, a Python install
under /tmp bound read-only on top of it; /dev/shm at `SHM_MB`), the rest read-only. When the
service runs as root, the launcher starts bubblewrap as `TRAINER_ID` (65534, nobody) and the
box is that user's: owner code never runs as root, outside or inside the namespaces. The
environment is the launcher's, built from nothing (`FIXED_ENV`, HOME=the box, and the Pipes
bootstrap variables). The data folder, the repository, /etc and /home are not there. The box
is on the service's disk (in Kubernetes, the shared volume): each file is capped by the
file-size limit, not their number.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
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

from pipeline.sandbox import cgroups
from pipeline.sandbox.errors import SandboxUnavailable
from pipeline.sandbox.syscall_filter import syscall_filter

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.core.config import Settings

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "launcher.py"
HARNESS = HERE / "harness.py"
# The reason an evaluation of owner code fails with where bubblewrap is not installed.
BWRAP_MISSING = "bubblewrap (bwrap) is not installed"
RUN_PREFIX = "mk-trainer-"
# The trainer's writable folder inside a run folder.
BOX = "box"
# The run folder's seccomp filter (`pipeline.sandbox.syscall_filter`), outside the box.
SECCOMP_FILE = "seccomp.bpf"
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
# Owner code runs as this uid and gid inside the sandbox, and outside too when the service is
# root (the launcher starts bubblewrap as it): never as root, whoever starts the service.
TRAINER_ID = 65534
# /dev/shm of the sandbox: a capped tmpfs like /tmp (POSIX semaphores, small shared arrays).
SHM_MB = 64


@dataclass(frozen=True)
class SandboxLimits:
    memory_mb: int
    cpu_seconds: int
    wall_seconds: int
    file_size_mb: int
    # Processes and threads of the run together (RLIMIT_NPROC in its own user namespace).
    processes: int = 64
    # Where the run's own cgroup is made (TRAINER_CGROUP_ROOT: `pipeline.sandbox.cgroups`).
    cgroup_root: str = "auto"

    @classmethod
    def from_settings(cls, settings: Settings) -> SandboxLimits:
        return cls(
            memory_mb=settings.trainer_memory_mb,
            cpu_seconds=settings.trainer_cpu_seconds,
            wall_seconds=settings.trainer_wall_seconds,
            file_size_mb=settings.trainer_file_size_mb,
            processes=settings.trainer_max_processes,
            cgroup_root=settings.trainer_cgroup_root,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "memory_mb": self.memory_mb,
            "cpu_seconds": self.cpu_seconds,
            "wall_seconds": self.wall_seconds,
            "file_size_mb": self.file_size_mb,
            "processes": self.processes,
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


@functools.cache
def cgroup_place(setting: str) -> cgroups.Place | None:
    """Where runs get their own cgroup, found once per setting and logged: the kernel holds
    the limits of the whole tree there, the launcher's sampling and rlimits everywhere."""
    place = cgroups.locate(setting)
    log.info("trainer runs' memory and processes held by %s", cgroups.describe(place))
    return place


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
    probe = [bwrap, *_namespace_arguments(), "--ro-bind", "/", "/", "true"]
    user = trainer_user()
    try:
        done = subprocess.run(
            probe,
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=10,
            check=False,
            # As the launcher would start it; switched in the child by subprocess's C code,
            # not a preexec_fn: safe in a threaded service.
            user=user[0] if user else None,
            group=user[1] if user else None,
            extra_groups=[] if user else None,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap (bwrap) could not be started: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        why = said[-1] if said else f"exit code {done.returncode}"
        return f"bubblewrap (bwrap) cannot make its sandbox here: {why}"
    return None


def trainer_user() -> tuple[int, int] | None:
    """The uid and gid the launcher starts owner code as: `TRAINER_ID` when the service is
    root, None (the service's own) otherwise."""
    return (TRAINER_ID, TRAINER_ID) if os.geteuid() == 0 else None


def _namespace_arguments() -> list[str]:
    """bubblewrap's namespaces and privileges: all namespaces new, the harness as an
    unprivileged uid without capabilities and unable to make a user namespace of its own, so
    that a root service's sandbox holds as a non-root one's does (no remount of a read-only
    bind, no mount at all)."""
    return [
        "--unshare-all",
        "--unshare-user",
        "--uid",
        str(TRAINER_ID),
        "--gid",
        str(TRAINER_ID),
        "--cap-drop",
        "ALL",
        "--disable-userns",
        "--die-with-parent",
    ]


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
        *_namespace_arguments(),
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
        # Shared memory is memory: capped like /tmp instead of bwrap's unbounded /dev.
        "--size",
        str(SHM_MB * 1024 * 1024),
        "--tmpfs",
        "/dev/shm",
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
            # Counted per user namespace: only bubblewrap gives the run one of its own (without
            # it the count would take in every process of the service's user).
            "max_processes": self.limits.processes if isolation != "none" else None,
        }
        (self.box / "job.json").write_text(json.dumps(job))
        # Made before the trainer runs, so the Pipes reader opens a file of the box, not a link.
        self.messages_path.touch()
        user = trainer_user() if isolation != "none" else None
        if user is not None:
            _hand_over(self.dir, self.box, user)
        seccomp = syscall_filter() if isolation != "none" else None
        if seccomp is not None:  # the launcher hands it to bubblewrap (`--seccomp FD`)
            (self.dir / SECCOMP_FILE).write_bytes(seccomp)
        launch: dict[str, Any] = {
            "command": sandbox_command(
                self.box, isolation, self.limits.file_size_mb * 1024 * 1024, self.job.env
            ),
            "seccomp": SECCOMP_FILE if seccomp is not None else None,
            "cwd": str(self.box),
            "env": {**FIXED_ENV, "HOME": str(self.box)},
            "pass_env": list(PIPES_ENV),
            "limits": self.limits.as_dict(),
            "user": user,
            "bwrap": isolation != "none",
            "cgroup": cgroup_place(self.limits.cgroup_root),
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
        with contextlib.suppress(OSError, ValueError):  # what a killed launcher left
            cgroups.remove(json.loads((self.dir / cgroups.RECORD).read_text()))
        remove_run_folder(self.dir)


def _hand_over(run_dir: Path, box: Path, user: tuple[int, int]) -> None:
    """A root service's run folder made usable by `user`: the box is theirs, the run folder
    only traversable (its other files stay the service's, unreadable to them)."""
    run_dir.chmod(0o711)
    for path in [box, *box.rglob("*")]:
        os.chown(path, *user, follow_symlinks=False)
    box.chmod(0o700)


def _make_removable(dir_fd: int) -> None:
    """Every folder under `dir_fd` made readable, writable and searchable by its owner, through
    descriptors that never follow a symbolic link: the trainer may have locked its folders."""
    with os.scandir(dir_fd) as entries:
        folders = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
    for name in folders:
        flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
        try:
            path_fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
            child = os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        finally:
            os.close(path_fd)
        try:
            _make_removable(child)
        finally:
            os.close(child)


def remove_run_folder(run_dir: Path) -> bool:
    """Remove a run folder, whatever modes the trainer left in its box; whether it is gone (a
    folder that stays is logged: run folders hold training rows)."""
    # RecursionError: folders nested thousands deep, which the trainer had the time to make.
    with contextlib.suppress(OSError, RecursionError):
        run_dir.chmod(0o700)
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            _make_removable(fd)
        finally:
            os.close(fd)
    with contextlib.suppress(RecursionError):
        shutil.rmtree(run_dir, ignore_errors=True)
    if os.path.lexists(run_dir):
        log.error("trainer run folder %s could not be removed", run_dir)
        return False
    return True
