"""The sandbox's seccomp filter: the system calls that make memory no process of the run holds.

The memory limit holds for the run's process tree (`launcher.py` sums what its processes hold).
Memory a process can make and then let go of while it stays allocated escapes that sum: a System
V shared memory segment outlives its last detach, a System V message queue or semaphore set lives
in the run's IPC namespace, and a `memfd_create` file that is never mapped is in no process's
resident size (each is capped by the file-size limit, not their number). The filter answers
`shmget`, `msgget`, `semget`, `memfd_create` and `memfd_secret` with ENOSYS, as a kernel without
them would (libraries fall back to files), and every system call of another ABI (i386 through
`int 0x80`, x32) the same way, so that no other numbering reaches the same calls.

bubblewrap installs the filter (`--seccomp FD`) just before it starts the harness: classic BPF,
built here without libseccomp for x86-64 and arm64; elsewhere there is no filter (docs/sandbox.md).
"""

from __future__ import annotations

import errno
import platform
import struct

# linux/audit.h
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# The calls refused, by their numbers in each ABI (asm/unistd_64.h, asm-generic/unistd.h).
REFUSED = {
    "x86_64": {"shmget": 29, "semget": 64, "msgget": 68, "memfd_create": 319, "memfd_secret": 447},
    "aarch64": {
        "shmget": 194,
        "semget": 190,
        "msgget": 186,
        "memfd_create": 279,
        "memfd_secret": 447,
    },
}
# x86-64's x32 ABI: its numbers carry this bit.
X32_BIT = 0x40000000
# linux/filter.h and linux/seccomp.h
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ENOSYS = 0x00050000 | errno.ENOSYS
ARCH_OFFSET = 4  # struct seccomp_data: int nr; __u32 arch; ...
NR_OFFSET = 0


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def syscall_filter(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (this one's by default), or None where none is built."""
    machine = machine or platform.machine()
    if machine not in AUDIT_ARCH:
        return None
    numbers = sorted(REFUSED[machine].values())
    program = [
        _op(LD_W_ABS, ARCH_OFFSET),
        _op(JEQ_K, AUDIT_ARCH[machine], jt=1),
        _op(RET_K, RET_ENOSYS),
        _op(LD_W_ABS, NR_OFFSET),
    ]
    if machine == "x86_64":
        program.append(_op(JGE_K, X32_BIT, jt=len(numbers) + 1))
    for index, number in enumerate(numbers):
        # Past the remaining comparisons and the ALLOW, to the ENOSYS that ends the program.
        program.append(_op(JEQ_K, number, jt=len(numbers) - index))
    program += [_op(RET_K, RET_ALLOW), _op(RET_K, RET_ENOSYS)]
    return b"".join(program)
