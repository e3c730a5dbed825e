"""The sandbox launcher: limits, an empty environment and a wall clock around one trainer run.

Run as a script (`python -I launcher.py RUN_DIR`), never imported by the service: it is the
process a Pipes client (or the plain subprocess runner) starts, so that whatever starts it,
the trainer gets the same sandbox. Standard library only. It reads `RUN_DIR/launch.json`
(written by `pipeline.sandbox.runs`), then

- asks to be killed when its parent dies, so a cancelled step leaves no trainer behind;
- sets the resource limits on itself (memory as RLIMIT_AS, CPU time, file size, no core
  files, 1,024 open files), which the sandbox inherits: a single-threaded launcher may set
  them before it starts a child, where a `preexec_fn` in the threaded service could deadlock;
- hands bubblewrap the run folder's seccomp filter (`--seccomp FD`: no System V IPC, no
  memfd, whose memory no process's size shows: `pipeline.sandbox.syscall_filter`);
- starts the command (bwrap around the harness) with an environment built from nothing
  but the fixed variables and the Pipes bootstrap variables, stdout and stderr to files of
  the run folder that the sandbox cannot see, in its own process group;
- when the service runs as root, starts it as the unprivileged user `launch.json` names, with
  no supplementary group (done by subprocess's C code in the child, not in Python), each
  folder bwrap binds first bound where that user can reach it, and its /tmp and /dev/shm
  mounted here with a file count (`_staged_binds`);
- starts it at nice 10 and, without a cgroup (below), samples the memory of the whole process
  tree at least once a second (the proportional set size of every descendant, so pages
  shared after a fork count once)
  and kills the run when the sum passes the memory limit: RLIMIT_AS bounds one process, this
  bounds them together;
- where `launch.json` names a cgroup place (`pipeline.sandbox.cgroups`), first makes the run's
  own cgroup with the memory and process limits, and starts the child from inside it, so the
  whole tree is born there and the kernel holds the limits between samples; an OOM kill in it
  is reported as the memory limit, and the group is removed (what is left in it killed) at the
  end;
- kills the whole group at the wall-time limit, and writes `RUN_DIR/status.json` (the exit
  code, the signal, whether the wall or the memory limit struck) outside the sandbox's reach.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import time
from types import ModuleType
from typing import IO, Any

MB = 1024 * 1024
PR_SET_PDEATHSIG = 1
# How often the tree's memory is sampled; less often where a sample costs more (a scan of
# /proc where the kernel does not list children, page tables walked near the limit), so that
# sampling stays under ~5% of a CPU, but at least once a second: the trainer decides what a
# sample costs (forked children sharing a large buffer: 1 s of page tables for 41 processes
# sharing 1 GB), and would otherwise decide how long it may outgrow the limit unseen.
SAMPLE_SECONDS = 0.2
SAMPLE_COST_SHARE = 0.05
MAX_SAMPLE_SECONDS = 1.0
# The sandbox's scheduling priority: below the service's and the launcher's own, so that the
# sampling keeps pace however many processes the trainer runs.
TRAINER_NICE = 10
PAGE = os.sysconf("SC_PAGE_SIZE")
# Mount namespaces and bind mounts, for `_staged_binds`.
CLONE_NEWNS = 0x00020000
MS_BIND_REC = 4096 | 16384
MS_REC_PRIVATE = 16384 | (1 << 18)
MS_NOSUID_NODEV = 2 | 4
BIND_OPTIONS = ("--bind", "--ro-bind")
# Files (inodes) a tmpfs of the sandbox may hold. Each costs kernel memory whatever its size
# (about 1.3 KB: 400,000 empty files in a 64 MB /dev/shm took 500 MB of slab in 8 s), and
# bubblewrap's own tmpfs takes as many as the kernel's default, half the RAM's pages.
TMPFS_FILES = 16384
# Open files of each process of the run. Socket and pipe buffers are kernel memory no process's
# size shows: 2,000 socket pairs queued 444 MB; a root service's limit (20,000 here) let one
# process hold 9,998 pairs.
OPEN_FILES = 1024


def _sibling(name: str) -> ModuleType:
    """A module of the launcher's folder, loaded by its path: `python -I` puts no folder of
    the service on the path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"sandbox_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cgroups = _sibling("cgroups")


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the wall clock still bounds the run
        pass


def _set_limits(limits: dict[str, int]) -> None:
    memory = limits["memory_mb"] * MB
    cpu = limits["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    # The soft limit sends SIGXCPU, which the report names; the hard one a second later kills.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    size = limits["file_size_mb"] * MB
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    files = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))


def _children_of(pid: int) -> list[int] | None:
    """The children of `pid`, or None where the kernel does not list them."""
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found += [int(child) for child in fh.read().split()]
    except FileNotFoundError:
        return None if os.path.exists(f"/proc/{pid}") else []
    except OSError:
        return []
    return found


def _parents() -> dict[int, list[int]]:
    """Every process's children, from a scan of /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
            parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(name))
    return children


def tree(root: int) -> list[int]:
    """`root` and all its descendants. Orphans of a sandbox are adopted by its PID namespace's
    first process, itself a descendant, so nothing of the sandbox leaves this tree."""
    listed = _children_of(root)
    scanned = _parents() if listed is None else None
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        below = scanned.get(pid, []) if scanned is not None else _children_of(pid)
        todo += below or []
    return found


def resident_bytes(pids: list[int]) -> int:
    """The resident size of `pids` together: cheap (counters), and never below their
    proportional size, but a page shared after a fork counts once per process."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            pass
    return total


def proportional_bytes(pids: list[int]) -> int:
    """The proportional set size of `pids` together: a page shared by n processes counts 1/n
    for each. Walks their page tables: read only once the resident size passes the limit."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except FileNotFoundError:
            total += resident_bytes([pid])  # no smaps_rollup (Linux < 4.14), or it exited
        except (OSError, ValueError, IndexError):
            pass
    return total


def _kill(pids: list[int], group: int) -> None:
    """SIGKILL to the child's group and to every process of its tree (one that left the group
    included); killing bubblewrap takes its whole PID namespace."""
    for kill, target in [(os.killpg, group), *((os.kill, pid) for pid in pids)]:
        with contextlib.suppress(OSError):
            kill(target, signal.SIGKILL)


def _watch(child: subprocess.Popen[bytes], wall: float, memory: int | None) -> str | None:
    """Wait for the child until it ends, the wall clock passes `wall`, or its tree holds more
    than `memory` bytes (not sampled when None: the run's cgroup holds it); which limit struck
    ("wall", "memory") or None."""
    if memory is None:
        try:
            child.wait(timeout=wall)
            return None
        except subprocess.TimeoutExpired:
            _kill(tree(child.pid), child.pid)
            return "wall"
    deadline = time.monotonic() + wall
    interval = SAMPLE_SECONDS
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _kill(tree(child.pid), child.pid)
            return "wall"
        try:
            child.wait(timeout=min(interval, remaining))
            return None
        except subprocess.TimeoutExpired:
            pass
        began = time.process_time()  # the launcher's own CPU time, reading /proc included
        pids = tree(child.pid)
        if resident_bytes(pids) > memory and proportional_bytes(pids) > memory:
            _kill(pids, child.pid)
            return "memory"
        spent = time.process_time() - began
        interval = min(MAX_SAMPLE_SECONDS, max(SAMPLE_SECONDS, spent / SAMPLE_COST_SHARE))


def _staged_binds(command: list[str], run_dir: str, user: list[int]) -> list[str]:
    """`command` with each bubblewrap bind source replaced by a folder of the run folder where
    that source is bound, in a mount namespace private to the launcher (and so to the bwrap it
    starts, and to nothing else); each `--size S --tmpfs DEST` replaced by the bind of a tmpfs
    mounted here, `user`'s, of S bytes and at most `TMPFS_FILES` files (bubblewrap sets no
    file count).

    For a root service only: bubblewrap then runs as the unprivileged user, who must reach
    every folder it binds, and may not (a Python installed under /root, a run folder under a
    private temp folder). The run folder is searchable but not readable by others, each stage
    folder empty outside this namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0 or libc.mount(b"none", b"/", None, MS_REC_PRIVATE, None):
        raise OSError(ctypes.get_errno(), "the launcher cannot make its mount namespace")
    stage = os.path.join(run_dir, "binds")
    os.mkdir(stage, 0o711)
    staged = list(command)
    at = 0
    while at < len(staged) - 2:
        target = os.path.join(stage, str(at))
        if staged[at] == "--size" and staged[at + 2] == "--tmpfs":
            os.mkdir(target, 0o755)
            options = f"size={staged[at + 1]},nr_inodes={TMPFS_FILES},mode=0755"
            options += f",uid={user[0]},gid={user[1]}"
            if libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID_NODEV, options.encode()):
                raise OSError(ctypes.get_errno(), f"cannot make the tmpfs for {staged[at + 3]}")
            staged[at : at + 4] = ["--bind", target, staged[at + 3]]
            at += 3
            continue
        if staged[at] not in BIND_OPTIONS:
            at += 1
            continue
        os.mkdir(target, 0o755)
        if libc.mount(staged[at + 1].encode(), target.encode(), None, MS_BIND_REC, None) != 0:
            raise OSError(ctypes.get_errno(), f"cannot stage {staged[at + 1]}")
        staged[at + 1] = target
        at += 3
    return staged


def _lower_priority() -> None:
    os.nice(TRAINER_NICE)


def _seccomp(command: list[str], run_dir: str, name: str | None) -> tuple[int, ...]:
    """bubblewrap's `--seccomp FD` put in `command` (after bwrap itself) for the run folder's
    filter `name`, opened here; the descriptors the child keeps."""
    if not name:
        return ()
    fd = os.open(os.path.join(run_dir, name), os.O_RDONLY | os.O_NOFOLLOW)
    command[1:1] = ["--seccomp", str(fd)]
    return (fd,)


def _environment(spec: dict[str, object]) -> dict[str, str]:
    env = {str(k): str(v) for k, v in dict(spec["env"]).items()}  # type: ignore[call-overload]
    for name in spec["pass_env"]:  # type: ignore[attr-defined]
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _private(path: str) -> IO[bytes]:
    """A new file only the launcher's user can read: the run folder is traversable by the
    trainer's user when the service is root, and the trainer's output may hold its rows."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def _run_groups(spec: dict[str, Any], run_dir: str) -> list[str]:
    """The run's cgroups with its limits, made where `launch.json` says, their folders written
    to `RUN_DIR/cgroups.json` (so the service removes them if the launcher is killed), the
    launcher in them; none where no place is given or they cannot be made or entered (the
    sampling still holds)."""
    place = spec.get("cgroup")
    if not place:
        return []
    limits = spec["limits"]
    name = os.path.basename(os.path.normpath(run_dir))
    try:
        folders: list[str] = cgroups.make(
            place, name, limits["memory_mb"] * MB, limits["processes"]
        )
    except OSError:
        return []
    with open(os.path.join(run_dir, cgroups.RECORD), "w", encoding="utf-8") as fh:
        json.dump(folders, fh)
    try:
        cgroups.enter(folders)
    except OSError:
        cgroups.leave(place)
        cgroups.remove(folders)
        return []
    return folders


def _start(folders: list[str], place: Any, **popen: Any) -> subprocess.Popen[bytes]:
    """The child started from inside the run's cgroups, which the launcher entered (it and all
    it starts are born there: no moment where owner code runs outside), the launcher back in
    its own groups after."""
    if not folders:
        return subprocess.Popen(**popen)
    try:
        return subprocess.Popen(**popen)
    finally:
        cgroups.leave(place)


def main(run_dir: str) -> int:
    _die_with_parent()
    with open(os.path.join(run_dir, "launch.json"), encoding="utf-8") as fh:
        spec = json.load(fh)
    env = _environment(spec)
    _set_limits(spec["limits"])
    wall = spec["limits"]["wall_seconds"]
    command = spec["command"]
    user = spec.get("user")
    # Switched in the child by subprocess's C code; no supplementary group (root's 0) is kept.
    as_user = {"user": user[0], "group": user[1], "extra_groups": []} if user else {}
    started = time.monotonic()
    struck = None
    folders: list[str] = []
    with (
        _private(os.path.join(run_dir, "stdout.txt")) as out,
        _private(os.path.join(run_dir, "stderr.txt")) as err,
    ):
        try:
            if user and spec.get("bwrap"):
                command = _staged_binds(command, run_dir, user)
            kept = _seccomp(command, run_dir, spec.get("seccomp"))
            folders = _run_groups(spec, run_dir)
            child = _start(
                folders,
                spec.get("cgroup"),
                args=command,
                pass_fds=kept,
                # In the child, as its user, before exec: the launcher has one thread.
                preexec_fn=_lower_priority,
                env=env,
                cwd=spec["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                **as_user,
            )
        except OSError as exc:  # the sandbox could not be started: said in its stderr
            err.write(f"the sandbox launcher could not start the sandbox: {exc}\n".encode())
            code = 127
        else:
            # Sampled only without a cgroup: the kernel holds the cgroup's limit exactly, where
            # a sample would count file pages the run maps but another group was charged for.
            memory = None if folders else spec["limits"]["memory_mb"] * MB
            struck = _watch(child, wall, memory)
            code = child.wait()
            if struck is None and cgroups.oom_killed(folders):
                struck = "memory"
    cgroups.remove(folders)
    status = {
        "returncode": code,
        "signal": signal.Signals(-code).name if code < 0 else None,
        "timed_out": struck == "wall",
        "memory_exceeded": struck == "memory",
        "cgroup": bool(folders),
        "seconds": round(time.monotonic() - started, 3),
    }
    tmp = os.path.join(run_dir, "status.json.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(status, fh)
    os.replace(tmp, os.path.join(run_dir, "status.json"))
    return 0 if code == 0 and struck is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
