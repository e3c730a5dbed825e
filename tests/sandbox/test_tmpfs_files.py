"""The sandbox's /tmp and /dev/shm hold a bounded number of files (docs/sandbox.md).

A file in a tmpfs costs kernel memory whatever its size: before the bound, a trainer made
400,000 empty files in the 64 MB /dev/shm (500 MB of slab in 8 s, outside the memory limit),
up to the kernel's default of half the RAM's pages per tmpfs. The launcher of a root service
mounts them itself, with a file count; bubblewrap's own tmpfs (a non-root service) has none.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.sandbox.runs import bwrap_path
from tests.sandbox.test_box_holds import reported
from tests.support.trainers import write_folder

pytestmark = [
    pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the file count is set by a root launcher"),
]

TMPFS_FILES = 16384


def test_tmp_and_dev_shm_hold_a_bounded_number_of_files(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "model",
        """
        import errno, os

        def fit(train, target):
            found = {}
            for place in ("/tmp", "/dev/shm"):
                made = 0
                try:
                    for n in range(40_000):
                        os.close(os.open(f"{place}/f{n}", os.O_CREAT | os.O_WRONLY, 0o600))
                        made += 1
                except OSError as exc:
                    made = (made, errno.errorcode[exc.errno])
                found[place] = made
            raise RuntimeError(f"found: {found!r}")
        """,
    )
    found = reported(folder)
    assert isinstance(found, dict) and set(found) == {"/tmp", "/dev/shm"}
    for place, result in found.items():
        assert isinstance(result, tuple), f"{result} files made in {place}: no bound"
        made, error = result
        assert TMPFS_FILES - 16 <= made < TMPFS_FILES and error == "ENOSPC"
