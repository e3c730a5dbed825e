"""A model folder's `requirements.txt`: checked, normalised, joined with the harness's pins, and
the key of the environment it installs into.

An owner's requirement is an exact pin (`name==version`, extras and environment markers
allowed, `--hash=algo:hex` options allowed). Refused, with the line's number: a range or a
bare name (the environment must be reproducible), a URL or a path (the index is the
operator's: nothing is fetched from where a folder says), any other option (`-r`, `-e`,
`--index-url`, ...), a package named twice, a file over 64 KiB.

The harness (`pipeline/sandbox/harness.py`) runs inside the environment and needs numpy,
pandas, pyarrow (the Parquet frames) and dagster-pipes: the service adds them, with what they
need, pinned at the versions it runs itself (`harness_pins`). A requirement naming one of them
at another version is refused naming both; a conflict further down is the resolver's to report.

The key (`env_key`) is the SHA-256 of the normalised requirements, the harness pins and the
service's Python (its interpreter path, version and platform): models with the same
requirements share one environment.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import cast

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from pipeline.core.errors import InvalidInput

REQUIREMENTS_FILE = "requirements.txt"
MAX_REQUIREMENTS_BYTES = 64 * 1024
# What the harness imports inside the environment (numpy and pandas; pyarrow reads the frames;
# dagster-pipes reports to Dagster).
HARNESS_PACKAGES = ("numpy", "pandas", "pyarrow", "dagster-pipes")
HASH_OPTION = re.compile(r"^--hash[= ]([A-Za-z0-9]+:[0-9a-fA-F]+)$")
# A comment starts at '#' at the start of a line or after whitespace (pip's rule).
COMMENT = re.compile(r"(^|\s+)#.*$")


@dataclass(frozen=True)
class Requirements:
    """A folder's checked requirements: one normalised line per package, by canonical name."""

    lines: dict[str, str]
    versions: dict[str, str]

    def install_lines(self) -> list[str]:
        """What uv installs: the owner's lines, then the harness pins the owner did not name."""
        pins = harness_pins()
        extra = [f"{name}=={version}" for name, version in pins.items() if name not in self.lines]
        return [*self.lines.values(), *extra]

    def env_key(self) -> str:
        """The environment's key: requirements, harness pins and the service's Python."""
        data = {
            "requirements": sorted(self.lines.values()),
            "harness": sorted(f"{n}=={v}" for n, v in harness_pins().items()),
            "python": service_python(),
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def service_python() -> str:
    """The interpreter an environment is made for: its path, version and platform."""
    version = ".".join(str(part) for part in sys.version_info[:3])
    executable = os.path.realpath(sys.executable)
    return f"{sys.implementation.name}-{version}-{sysconfig.get_platform()}:{executable}"


@lru_cache(maxsize=1)
def harness_pins() -> dict[str, str]:
    """The harness's packages and everything they need on this platform, at the versions the
    service itself runs: canonical name -> version."""
    environment: dict[str, str] = {**cast("dict[str, str]", default_environment()), "extra": ""}
    pins: dict[str, str] = {}
    todo = list(HARNESS_PACKAGES)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in pins:
            continue
        pins[name] = importlib.metadata.version(name)
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate(environment):
                todo.append(requirement.name)
    return dict(sorted(pins.items()))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each requirement, comments removed, continuations joined."""
    lines: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = COMMENT.sub("", raw).rstrip()
        start, joined = pending if pending is not None else (number, "")
        if line.endswith("\\"):
            pending = (start, joined + line[:-1] + " ")
            continue
        pending = None
        if (joined + line).strip():
            lines.append((start, (joined + line).strip()))
    if pending is not None and pending[1].strip():
        lines.append((pending[0], pending[1].strip()))
    return lines


def _split_options(where: str, line: str) -> tuple[str, list[str]]:
    """The requirement and its `--hash` values; any other option is refused."""
    if line.startswith("-"):
        option = line.split()[0]
        raise InvalidInput(
            f"{where}: option {option} is not allowed: requirements are exact pins, installed "
            "from the package index the operator configures"
        )
    parts = re.split(r"\s+(?=--)", line)
    hashes: list[str] = []
    for option in parts[1:]:
        match = HASH_OPTION.match(option.strip())
        if match is None:
            raise InvalidInput(f"{where}: only --hash=ALGORITHM:HEX may follow a requirement")
        hashes.append(match.group(1))
    return parts[0].strip(), hashes


def _pinned(where: str, text: str) -> Requirement:
    if "://" in text or text.startswith((".", "/", "~")) or text.endswith((".whl", ".zip", ".gz")):
        raise InvalidInput(
            f"{where}: {text!r} is a URL or a path: only name==version from the operator's "
            "package index is installed"
        )
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise InvalidInput(f"{where}: not a requirement: {exc}") from None
    if requirement.url is not None:
        raise InvalidInput(
            f"{where}: {requirement.name} @ {requirement.url} is a URL requirement: only "
            "name==version from the operator's package index is installed"
        )
    specifiers = list(requirement.specifier)
    if (
        len(specifiers) != 1
        or specifiers[0].operator not in ("==", "===")
        or "*" in specifiers[0].version
    ):
        raise InvalidInput(
            f"{where}: {text!r} is not pinned: write an exact version, "
            f"{requirement.name}==VERSION (the environment is installed once and must not drift)"
        )
    return requirement


def parse_requirements(data: bytes) -> Requirements:
    """A requirements file's content, checked (module docstring); InvalidInput otherwise."""
    if len(data) > MAX_REQUIREMENTS_BYTES:
        raise InvalidInput(
            f"{REQUIREMENTS_FILE} is {len(data)} bytes; at most {MAX_REQUIREMENTS_BYTES} "
            "(64 KiB) are read"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput(f"{REQUIREMENTS_FILE} is not UTF-8 text") from None
    pins = harness_pins()
    lines: dict[str, str] = {}
    versions: dict[str, str] = {}
    for number, line in _logical_lines(text):
        where = f"{REQUIREMENTS_FILE} line {number}"
        body, hashes = _split_options(where, line)
        requirement = _pinned(where, body)
        name = canonicalize_name(requirement.name)
        version = next(iter(requirement.specifier)).version
        if name in lines:
            raise InvalidInput(f"{where}: {requirement.name} is named twice")
        if name in pins and pins[name] != version:
            raise InvalidInput(
                f"{where}: {requirement.name}=={version} conflicts with {name}=={pins[name]}, "
                "which the service puts in every environment for its harness (the version "
                "the service runs); pin that version or leave the line out"
            )
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        marker = f"; {requirement.marker}" if requirement.marker is not None else ""
        options = "".join(f" --hash={value}" for value in hashes)
        lines[name] = f"{name}{extras}=={version}{marker}{options}"
        versions[name] = version
    return Requirements(lines, versions)


def folder_requirements(folder: Path) -> Requirements | None:
    """The folder's checked `requirements.txt`, or None when it has none (it runs as before,
    with the service's packages)."""
    path = folder / REQUIREMENTS_FILE
    if not path.is_file():
        return None
    with path.open("rb") as fh:
        data = fh.read(MAX_REQUIREMENTS_BYTES + 1)
    if len(data) > MAX_REQUIREMENTS_BYTES:
        size = path.stat().st_size
        raise InvalidInput(
            f"{REQUIREMENTS_FILE} is {size} bytes; at most {MAX_REQUIREMENTS_BYTES} (64 KiB)"
        )
    return parse_requirements(data)
