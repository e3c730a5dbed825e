"""Process management for `serve` and `dev`: graceful stops, and no orphaned Dagster processes.

Two problems this module solves (see docs/operations.md):

- uvicorn catches SIGINT and SIGTERM, drains, and then re-raises the signal with the previous
  handler restored. With Python's default SIGTERM handler that kills the process before any
  `finally:` of the caller runs. `serve_app` installs handlers that only note the signal, so the
  caller's clean-up always runs after the drain.
- `dagster dev` starts a webserver, a daemon and code servers. If we die (even by SIGKILL) they
  must go too. `SupervisedTree` starts a small watchdog (`python -m cli.processes`) that owns the
  tree: it starts the command in a new session (one process group) and stops the whole group when
  the pipe from us says so or reaches end-of-file, which the kernel causes when we die. The
  command itself also gets a parent-death signal, in case the watchdog is killed.

This module imports nothing heavy at module level: the watchdog starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

STOP = b"stop\n"
KILL = b"kill\n"
# After the command has stopped, how long the rest of its group gets between SIGTERM and SIGKILL.
STRAGGLER_SECONDS = 3.0
POLL_SECONDS = 0.2
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _set_parent_death_signal(sig: int, parent_pid: int) -> None:
    """Ask Linux to send `sig` to this process when its parent exits (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    # The parent may have died between fork and prctl: then nobody would send the signal.
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


class _Watchdog:
    """Runs `command` as the leader of a new process group and takes the group down on request."""

    def __init__(self, pipe_fd: int, grace: float, command: Sequence[str]) -> None:
        self.pipe_fd = pipe_fd
        self.grace = grace
        self.command = list(command)
        self.stop_requested = False
        self.kill_requested = False
        self.pipe_open = True

    def on_term(self, _sig: int, _frame: FrameType | None) -> None:
        if self.stop_requested:
            self.kill_requested = True
        self.stop_requested = True

    def read_pipe(self, timeout: float) -> None:
        """Wait up to `timeout` for a word from the parent; EOF (the parent died) means stop."""
        if not self.pipe_open:
            time.sleep(timeout)
            return
        try:
            ready, _, _ = select.select([self.pipe_fd], [], [], timeout)
        except InterruptedError:
            return
        if not ready:
            return
        data = os.read(self.pipe_fd, 64)
        if not data:
            self.pipe_open = False
            os.close(self.pipe_fd)
        if KILL.strip() in data:
            self.kill_requested = True
        self.stop_requested = True

    def run(self) -> int:
        # Ctrl-C reaches every process of the terminal's foreground group; the parent decides.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self.on_term)
        watchdog_pid = os.getpid()

        def prepare_child() -> None:
            # An ignored SIGINT survives exec, and dagster dev maps SIGTERM to its SIGINT handler.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _set_parent_death_signal(signal.SIGTERM, watchdog_pid)

        child = subprocess.Popen(self.command, start_new_session=True, preexec_fn=prepare_child)
        while not self.stop_requested and child.poll() is None:
            self.read_pipe(POLL_SECONDS)
        return self.stop(child)

    def stop(self, child: subprocess.Popen[bytes]) -> int:
        """SIGTERM to the command, up to `grace` for it, then the rest of its group goes too."""
        pgid = child.pid
        if child.poll() is None and not self.kill_requested:
            child.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.grace
            while child.poll() is None and not self.kill_requested:
                if time.monotonic() >= deadline:
                    break
                self.read_pipe(POLL_SECONDS)
        if child.poll() is None or self.kill_requested:
            _signal_group(pgid, signal.SIGKILL)
        else:
            _signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + STRAGGLER_SECONDS
            while group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
            _signal_group(pgid, signal.SIGKILL)
        returncode = child.wait()
        return returncode if returncode >= 0 else 128 - returncode


class SupervisedTree:
    """A command and everything it starts, which ends when we end, however we end.

    `stop()` asks for a graceful stop (SIGTERM to the command, SIGKILL to its whole process group
    after `grace` seconds); it is safe to call from a signal handler and more than once. `kill()`
    takes the group down at once.
    """

    def __init__(
        self, command: Sequence[str], *, env: dict[str, str], cwd: Path, grace: float
    ) -> None:
        read_fd, self._write_fd = os.pipe()
        self._closed = False
        # The command gets what is left of the grace once its stragglers have had theirs.
        command_grace = max(1.0, grace - STRAGGLER_SECONDS)
        watchdog = [sys.executable, "-m", "cli.processes", "--pipe-fd", str(read_fd)]
        watchdog += ["--grace", str(command_grace), "--", *command]
        try:
            self.watchdog = subprocess.Popen(watchdog, env=env, cwd=cwd, pass_fds=[read_fd])
        finally:
            os.close(read_fd)

    def _send(self, word: bytes) -> None:
        # This also runs in signal handlers: no locks, nothing that can block for long.
        if self._closed:
            return
        with contextlib.suppress(OSError):
            os.write(self._write_fd, word)
        if word == KILL:
            self._closed = True
            with contextlib.suppress(OSError):
                os.close(self._write_fd)

    def stop(self) -> None:
        self._send(STOP)

    def kill(self) -> None:
        self._send(KILL)

    def wait(self, timeout: float | None = None) -> int:
        """The watchdog's exit code, after stopping the tree; kills it if `timeout` passes."""
        self.stop()
        try:
            return self.watchdog.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.watchdog.wait(timeout=STRAGGLER_SECONDS + 2)
        finally:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(OSError):
                    os.close(self._write_fd)


@contextlib.contextmanager
def signals_noted(on_signal: Callable[[int], None]) -> Iterator[list[int]]:
    """SIGINT and SIGTERM call `on_signal` instead of ending the process; restored afterwards."""
    received: list[int] = []

    def handler(sig: int, _frame: FrameType | None) -> None:
        received.append(sig)
        on_signal(sig)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def serve_app(config: Any, *, on_exit: Callable[[], None] | None = None) -> None:
    """Run uvicorn with `config` until SIGINT or SIGTERM, then drain in-flight requests.

    The drain lasts up to the config's `timeout_graceful_shutdown`. `on_exit` runs as soon as
    the stop signal arrives (while requests still drain), so other processes can stop at the
    same time. Returns normally after a signal, so the caller's clean-up runs.
    """
    import uvicorn  # ~70 ms; the watchdog (`python -m cli.processes`) never needs it

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if on_exit is not None:
                on_exit()
            super().handle_exit(sig, frame)

    server = Server(config)

    def noted(_sig: int) -> None:
        # Before uvicorn installs its own handlers (and again when it re-raises the signal
        # after the drain): stop, without ending the process.
        if on_exit is not None:
            on_exit()
        server.should_exit = True

    with signals_noted(noted):
        server.run()


def serve_workers(config: Any) -> None:
    """Run `config.workers` uvicorn worker processes on one listening socket until a signal.

    uvicorn's supervisor starts each worker with `spawn` (a fresh interpreter that builds its
    own app), restarts a worker that dies, and on SIGINT/SIGTERM sends SIGTERM to every worker,
    each of which drains as a single server does, then returns. SIGHUP replaces the workers
    one at a time; SIGTTIN/SIGTTOU add or remove one.
    """
    from uvicorn.supervisors import Multiprocess

    sock = config.bind_socket()
    try:
        Multiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    """The watchdog: `python -m cli.processes --pipe-fd N --grace S -- command ...`."""
    parser = argparse.ArgumentParser(prog="python -m cli.processes", description=__doc__)
    parser.add_argument("--pipe-fd", type=int, required=True)
    parser.add_argument("--grace", type=float, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    return _Watchdog(args.pipe_fd, args.grace, command).run()


if __name__ == "__main__":
    raise SystemExit(main())
