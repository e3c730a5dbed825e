"""Temp files that say whether their writer is alive, so a restart can remove abandoned ones.

A writer holds an exclusive `flock` on its temp file or folder for as long as it works on it;
the kernel drops the lock when the process ends, however it ends (SIGKILL, OOM killer). At start,
`remove_abandoned` deletes every matching temp path whose lock it can take: nobody is writing
it. Paths still locked belong to a live process (another API process sharing the data dir) and
are left alone.

The remover deletes while it holds the lock, and a writer checks after locking that its path
still exists, so a path created just before a sweep is never used after being deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)


def _lock_if_present(path: Path, fd: int) -> bool:
    """Lock `fd` (blocking: a sweep holds it briefly); False if `path` was removed meanwhile."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def locked_temp_dir(root: Path, prefix: str) -> tuple[Path, int]:
    """A new folder under `root` and the descriptor holding its lock (close it after removal)."""
    root.mkdir(parents=True, exist_ok=True)
    while True:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        fd = os.open(path, os.O_RDONLY)
        if _lock_if_present(path, fd):
            return path, fd
        os.close(fd)


def locked_temp_file(folder: Path, prefix: str, suffix: str) -> tuple[Path, int]:
    """A new file (mode 0600) in `folder`, opened for writing, locked by the returned descriptor."""
    while True:
        fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
        path = Path(name)
        if _lock_if_present(path, fd):
            return path, fd
        os.close(fd)


def _try_lock(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_abandoned(paths: Iterable[Path]) -> int:
    """Remove the given temp files and folders that no live process holds; how many went."""
    removed = 0
    for path in paths:
        fd = _try_lock(path)
        if fd is None:
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            removed += 1
        finally:
            os.close(fd)
    return removed


def sweep(root: Path, pattern: str, *, recursive: bool = False) -> int:
    """`remove_abandoned` over the matches of `pattern` under `root`, logging what it did."""
    if not root.is_dir():
        return 0
    matches = root.rglob(pattern) if recursive else root.glob(pattern)
    removed = remove_abandoned(list(matches))
    if removed:
        log.info("removed %d abandoned temp file(s) matching %s under %s", removed, pattern, root)
    return removed
