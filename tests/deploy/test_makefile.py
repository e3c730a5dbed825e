"""The Makefile's bubblewrap step (`make install`, `make run`): the sandbox of a model's own
training code needs `bwrap`; it is installed where that can be done without asking, and one
line says so everywhere else. Run against fake `apt-get`, `id` and `sudo` on a PATH without
the real tools, so nothing is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
HINT = "make: bubblewrap (bwrap) is not installed: evaluations of the loan-default demo model"

pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def make_bubblewrap(
    tmp_path: Path, *, uid: int, apt: str | None, sudo: bool = False, bwrap: bool = False
) -> str:
    """`make bubblewrap`'s output; `apt`: the fake apt-get's last line (its exit status), None
    for no apt-get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool(bin_dir, "id", f"echo {uid}")
    if bwrap:
        tool(bin_dir, "bwrap", "exit 0")
    if apt is not None:
        tool(bin_dir, "apt-get", f'echo "$@" >> {tmp_path}/apt.log\n{apt}')
    if sudo:
        tool(bin_dir, "sudo", f'echo sudo >> {tmp_path}/apt.log\n[ "$1" = -n ] && shift\n"$@"')
    done = subprocess.run(
        [str(MAKE), "-s", "-C", str(ROOT), "bubblewrap"],
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr  # `make run` goes on: the other demo model works
    return done.stdout


def apt_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def test_root_with_apt_installs_debians_bubblewrap(tmp_path: Path) -> None:
    out = make_bubblewrap(tmp_path, uid=0, apt="exit 0")
    assert out.strip() == "make: installing bubblewrap (the sandbox of models' own training code)"
    assert apt_calls(tmp_path) == ["install -y -qq --no-install-recommends bubblewrap"]


def test_stale_package_lists_are_updated_once_before_a_second_try(tmp_path: Path) -> None:
    # Fails until `update` ran, as on a fresh container without package lists.
    make_bubblewrap(tmp_path, uid=0, apt=f'[ "$1" = update ] && : > {tmp_path}/lists\n'
                    f"[ -e {tmp_path}/lists ]")  # fmt: skip
    assert [call.split()[0] for call in apt_calls(tmp_path)] == ["install", "update", "install"]


def test_a_user_with_passwordless_sudo_installs_through_it(tmp_path: Path) -> None:
    make_bubblewrap(tmp_path, uid=1000, apt="exit 0", sudo=True)
    assert apt_calls(tmp_path)[:2] == ["sudo", "sudo"]  # the `sudo -n true` probe, then apt
    assert "install -y -qq --no-install-recommends bubblewrap" in apt_calls(tmp_path)


@pytest.mark.parametrize(
    ("uid", "apt"),
    [(1000, "exit 0"), (0, None)],
    ids=["a user without sudo", "no apt-get"],
)
def test_where_it_cannot_be_installed_one_line_says_so(
    tmp_path: Path, uid: int, apt: str | None
) -> None:
    out = make_bubblewrap(tmp_path, uid=uid, apt=apt)
    assert out.splitlines() == [
        f"{HINT} will fail until it is; install it (Debian/Ubuntu: sudo apt-get install "
        "bubblewrap), see docs/sandbox.md"
    ]
    assert apt_calls(tmp_path) == []


def test_a_failed_install_says_so_and_make_goes_on(tmp_path: Path) -> None:
    out = make_bubblewrap(tmp_path, uid=0, apt="exit 100")
    assert out.splitlines()[-1].startswith(f"make: apt-get could not install it; {HINT[6:]}")


def test_nothing_happens_where_bwrap_is_installed(tmp_path: Path) -> None:
    out = make_bubblewrap(tmp_path, uid=0, apt="exit 0", bwrap=True)
    assert out == "" and apt_calls(tmp_path) == []
