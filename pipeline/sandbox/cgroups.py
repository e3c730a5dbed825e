"""A cgroup per trainer run, where the host lets the service make one: the kernel then holds
the memory and process limits of the whole process tree, where the launcher's sampling only
sees it at most once a second.

Standard library only: the launcher (`pipeline/sandbox/launcher.py`, a script run with
`python -I`) loads this file by its path, the service imports it. `locate` finds where run
groups can be made (cgroup v2 with the memory and pids controllers delegated, or the v1
memory and pids hierarchies), `make` makes a run's groups with its limits, `enter` places
the calling process in them, `oom_killed` says whether the kernel killed a process of the
run for memory, `remove` kills what is left in them and removes them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

CONTROLLERS = ("memory", "pids")
# TRAINER_CGROUP_ROOT: the service's own cgroup (auto), none, or a delegated v2 folder.
AUTO = "auto"
OFF = "none"
# The run folder's file naming the run's groups, for the service to remove if the launcher
# could not (it was killed).
RECORD = "cgroups.json"
# Processes of a run the harness's own count (RLIMIT_NPROC) leaves out: bubblewrap's two, its
# parent process and the sandbox's first.
OWN_PROCESSES = 2
# How long `remove` waits for killed processes to leave a group before it gives up.
REMOVE_SECONDS = 5.0

# A place: the folders run groups are made in, each with the folder of its hierarchy where the
# caller's own group is (to return to) and the cgroup version. v2 has one folder for both
# controllers, v1 one per hierarchy.
Place = list[dict[str, str]]


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, options) of every cgroup file system."""
    found = []
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                found.append((parts[1], parts[2], set(parts[3].split(","))))
    return found


def _own_groups() -> dict[str, str]:
    """The caller's group in each hierarchy: controller name (or "" for v2) to its path."""
    groups: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as fh:
        for line in fh:
            _, names, path = line.rstrip("\n").split(":", 2)
            for name in names.split(",") if names else [""]:
                groups[name] = path
    return groups


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(value)


def _v2_place(folder: str, home: str) -> Place | None:
    """`folder` as a place for v2 run groups: writable, with memory and pids enabled for its
    children (enabled here where they are not yet and may be)."""
    if not os.access(folder, os.W_OK):
        return None
    control = os.path.join(folder, "cgroup.subtree_control")
    with contextlib.suppress(OSError):
        if not set(CONTROLLERS) <= set(_read(control).split()):
            _write(control, " ".join(f"+{name}" for name in CONTROLLERS))
    try:
        if not set(CONTROLLERS) <= set(_read(control).split()):
            return None
    except OSError:
        return None
    return [{"version": "2", "parent": folder, "home": home}]


def locate(setting: str) -> Place | None:
    """Where this process may make run groups with memory and pids limits, or None (the
    setting is none, or the host gives no such cgroup)."""
    if setting == OFF:
        return None
    try:
        mounts = _mounts()
        own = _own_groups()
    except (OSError, ValueError):
        return None
    unified = [point for point, kind, _ in mounts if kind == "cgroup2"]
    if setting != AUTO:
        home = os.path.join(unified[0], own.get("", "/").lstrip("/")) if unified else setting
        return _v2_place(setting, home)
    for point in unified:
        here = os.path.join(point, own.get("", "/").lstrip("/"))
        if os.path.exists(os.path.join(here, "cgroup.controllers")):
            controllers = set(_read(os.path.join(here, "cgroup.controllers")).split())
            if set(CONTROLLERS) <= controllers and (unified_place := _v2_place(here, here)):
                return unified_place
    place: Place = []
    for name in CONTROLLERS:
        points = [point for point, kind, opts in mounts if kind == "cgroup" and name in opts]
        if not points or name not in own:
            return None
        here = os.path.join(points[0], own[name].lstrip("/"))
        if not os.access(here, os.W_OK):
            return None
        place.append({"version": "1", "controller": name, "parent": here, "home": here})
    return place


def describe(place: Place | None) -> str:
    if not place:
        return "sampling and rlimits (no cgroup)"
    return f"cgroup v{place[0]['version']} under " + ", ".join(p["parent"] for p in place)


def make(place: Place, name: str, memory_bytes: int, processes: int) -> list[str]:
    """The run's groups, made under `place` with its limits; OSError (nothing left made) where
    one cannot be. Swap is not allowed: the limit is of memory and swap together."""
    made: list[str] = []
    try:
        for entry in place:
            folder = os.path.join(entry["parent"], name)
            os.mkdir(folder, 0o755)
            made.append(folder)
            limits = _v2_limits if entry["version"] == "2" else _v1_limits
            limits(folder, entry.get("controller", ""), memory_bytes, processes + OWN_PROCESSES)
    except OSError:
        remove(made)
        raise
    return made


def _v2_limits(folder: str, _: str, memory_bytes: int, processes: int) -> None:
    _write(os.path.join(folder, "memory.max"), str(memory_bytes))
    swap = os.path.join(folder, "memory.swap.max")
    if os.path.exists(swap):
        _write(swap, "0")
    _write(os.path.join(folder, "pids.max"), str(processes))


def _v1_limits(folder: str, controller: str, memory_bytes: int, processes: int) -> None:
    if controller == "pids":
        _write(os.path.join(folder, "pids.max"), str(processes))
        return
    _write(os.path.join(folder, "memory.limit_in_bytes"), str(memory_bytes))
    both = os.path.join(folder, "memory.memsw.limit_in_bytes")  # set after: it must be >=
    if os.path.exists(both):
        _write(both, str(memory_bytes))


def enter(folders: list[str]) -> None:
    """The calling process moved into `folders` (its children are born there)."""
    for folder in folders:
        _write(os.path.join(folder, "cgroup.procs"), str(os.getpid()))


def leave(place: Place) -> bool:
    """The calling process moved back to its own groups; whether it could be."""
    try:
        for entry in place:
            _write(os.path.join(entry["home"], "cgroup.procs"), str(os.getpid()))
    except OSError:
        return False
    return True


def oom_killed(folders: list[str]) -> bool:
    """Whether the kernel killed a process of these groups for passing their memory limit."""
    for folder in folders:
        for name in ("memory.events", "memory.oom_control"):
            with contextlib.suppress(OSError, ValueError):
                for line in _read(os.path.join(folder, name)).splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
    return False


def _members(folder: str) -> list[int]:
    try:
        return [int(pid) for pid in _read(os.path.join(folder, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def remove(folders: list[str]) -> bool:
    """Every process left in `folders` killed, then the folders removed; whether all are gone.
    A process of the run that left its process group or PID namespace is found here too."""
    deadline = time.monotonic() + REMOVE_SECONDS
    for folder in reversed(folders):
        while os.path.isdir(folder):
            for pid in _members(folder):
                if pid == os.getpid():
                    return False  # the caller itself, which could not leave
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            try:
                os.rmdir(folder)
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.02)
    return True
