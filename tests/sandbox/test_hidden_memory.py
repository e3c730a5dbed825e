"""Memory no process of the run holds is refused (docs/sandbox.md): run as root here and in CI.

The run's memory limit sums what its processes hold. A System V shared memory segment stays
allocated after its last detach, a message queue or semaphore set in the run's IPC namespace,
and a memfd file that is never mapped is in no process's size: before the seccomp filter a
trainer held 1,200 MB of detached segments and 1,200 MB of memfds under a 1,024 MB limit.
Socket buffers are kernel memory too, bounded through the open-files limit.
"""

from __future__ import annotations

import dataclasses
import errno
from pathlib import Path

import pytest

from pipeline.sandbox.runs import bwrap_path
from pipeline.sandbox.syscall_filter import syscall_filter
from tests.sandbox.test_box_holds import reported
from tests.support.trainers import LIMITS, write_folder

pytestmark = [
    pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(syscall_filter() is None, reason="no seccomp filter for this machine"),
]

HOARDER = """
import ctypes, os, time

IPC_PRIVATE, IPC_CREAT = 0, 0o1000
MB = 1024 * 1024

def fit(train, target):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    found = {"shm_mb": 0, "memfd_mb": 0}
    for _ in range(3):  # 1,200 MB of segments, each detached once written
        segment = libc.shmget(IPC_PRIVATE, 400 * MB, IPC_CREAT | 0o600)
        if segment < 0:
            found["shmget"] = ctypes.get_errno()
            break
        address = libc.shmat(segment, None, 0)
        ctypes.memset(address, 1, 400 * MB)
        libc.shmdt(ctypes.c_void_p(address))
        found["shm_mb"] += 400
    kept = []
    try:
        for _ in range(20):  # 1,200 MB of files under the 64 MB file-size limit, never mapped
            kept.append(os.memfd_create("hoard"))
            for _ in range(60):
                os.write(kept[-1], b"x" * MB)
            found["memfd_mb"] += 60
    except OSError as exc:
        found["memfd_create"] = exc.errno
    queue = libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600)
    found["msgget"] = ctypes.get_errno() if queue < 0 else "made"
    semaphores = libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o600)
    found["semget"] = ctypes.get_errno() if semaphores < 0 else "made"
    time.sleep(1)  # the launcher samples the tree meanwhile
    raise RuntimeError(f"found: {found!r}")
"""


def test_memory_outside_every_process_cannot_be_made(tmp_path: Path) -> None:
    found = reported(
        write_folder(tmp_path / "model", HOARDER), dataclasses.replace(LIMITS, memory_mb=1024)
    )
    assert found == {
        "shm_mb": 0,
        "memfd_mb": 0,
        "shmget": errno.ENOSYS,
        "memfd_create": errno.ENOSYS,
        "msgget": errno.ENOSYS,
        "semget": errno.ENOSYS,
    }


def test_socket_buffers_are_bounded_by_the_open_files_limit(tmp_path: Path) -> None:
    """A queued socket buffer is kernel memory: 2,000 socket pairs held 444 MB, and a root
    service's open-files limit let one process make 9,998."""
    folder = write_folder(
        tmp_path / "model",
        """
        import socket

        def fit(train, target):
            pairs = []
            try:
                while len(pairs) < 5_000:
                    pairs.append(socket.socketpair())
            except OSError:
                pass
            raise RuntimeError(f"found: {len(pairs)}")
        """,
    )
    made = reported(folder)
    assert isinstance(made, int) and 0 < made < 512


def test_the_filter_is_one_program_per_architecture() -> None:
    """Eight bytes an instruction; x86-64 also refuses the x32 numbers; unknown: no filter."""
    x86, arm = syscall_filter("x86_64"), syscall_filter("aarch64")
    assert x86 is not None and arm is not None
    assert (len(x86) // 8, len(arm) // 8) == (4 + 1 + 5 + 2, 4 + 5 + 2)
    assert syscall_filter("riscv64") is None
