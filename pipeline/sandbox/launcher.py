"""The sandbox launcher: limits, an empty environment and a wall clock around one trainer run.

Run as a script (`python -I launcher.py RUN_DIR`), never imported by the service: it is the
process a Pipes client (or the plain subprocess runner) starts, so that whatever starts it,
the trainer gets the same sandbox. Standard library only. It reads `RUN_DIR/launch.json`
(written by `pipeline.sandbox.runs`), then

- asks to be killed when its parent dies, so a cancelled step leaves no trainer behind;
- sets the resource limits on itself (memory as RLIMIT_AS, CPU time, file size, no core
  files), which the sandbox inherits: a single-threaded launcher may set them before it
  starts a child, where a `preexec_fn` in the threaded service could deadlock;
- starts the command (bwrap around the harness) with an environment built from nothing
  but the fixed variables and the Pipes bootstrap variables, stdout and stderr to files of
  the run folder that the sandbox cannot see, in its own process group;
- kills the whole group at the wall-time limit, and writes `RUN_DIR/status.json` (the exit
  code, the signal, whether the wall limit struck) outside the sandbox's reach.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time

MB = 1024 * 1024
PR_SET_PDEATHSIG = 1


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


def _environment(spec: dict[str, object]) -> dict[str, str]:
    env = {str(k): str(v) for k, v in dict(spec["env"]).items()}  # type: ignore[call-overload]
    for name in spec["pass_env"]:  # type: ignore[attr-defined]
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def main(run_dir: str) -> int:
    _die_with_parent()
    with open(os.path.join(run_dir, "launch.json"), encoding="utf-8") as fh:
        spec = json.load(fh)
    env = _environment(spec)
    _set_limits(spec["limits"])
    wall = spec["limits"]["wall_seconds"]
    started = time.monotonic()
    with (
        open(os.path.join(run_dir, "stdout.txt"), "wb") as out,
        open(os.path.join(run_dir, "stderr.txt"), "wb") as err,
    ):
        child = subprocess.Popen(
            spec["command"],
            env=env,
            cwd=spec["cwd"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timed_out = False
        try:
            child.wait(timeout=wall)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    code = child.returncode
    status = {
        "returncode": code,
        "signal": signal.Signals(-code).name if code < 0 else None,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - started, 3),
    }
    tmp = os.path.join(run_dir, "status.json.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(status, fh)
    os.replace(tmp, os.path.join(run_dir, "status.json"))
    return 0 if code == 0 and not timed_out else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
