"""Starting the disk write of a file's bytes while more are still arriving (Linux).

An upload is received into a temp file and made durable (`fsync`) before it is stored; by then
the kernel has usually written none of it (its background writeback starts after 30 s or
gigabytes of dirty pages), so the fsync of a 480 MiB upload waited about 0.2 s after the last
byte. `start_writeback` asks the kernel to start writing a range now, without waiting for it
(`sync_file_range(SYNC_FILE_RANGE_WRITE)`): the final fsync then has only the last range
left. Elsewhere, and where the call fails, it does nothing: the fsync still makes the file
durable; this only moves the disk's work earlier.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable

SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if platform.system() != "Linux":
        return None
    function = getattr(ctypes.CDLL(None), "sync_file_range", None)
    if function is None:
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


_SYNC_FILE_RANGE = _sync_file_range()


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing `length` bytes of `fd` from `offset` to disk; returns at once."""
    if _SYNC_FILE_RANGE is not None and length > 0:
        _SYNC_FILE_RANGE(fd, offset, length, SYNC_FILE_RANGE_WRITE)
