"""Wheel folders made without a package index: small wheels written here, and the service's own
installed packages packed back into wheels (what an air-gapped operator's folder holds)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import tarfile
import textwrap
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.utils import canonicalize_name


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _write(
    out: Path, dist_info: str, entries: Iterable[tuple[str, bytes]], meta: dict[str, bytes]
) -> Path:
    records: list[str] = []
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        for path, data in entries:
            archive.writestr(path, data)
            records.append(_record_line(path, data))
        for name, data in meta.items():
            archive.writestr(f"{dist_info}/{name}", data)
            records.append(_record_line(f"{dist_info}/{name}", data))
        records.append(f"{dist_info}/RECORD,,")
        archive.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return out


def write_wheel(
    folder: Path,
    name: str,
    version: str,
    modules: dict[str, str],
    requires: Iterable[str] = (),
) -> Path:
    """A pure-Python wheel of `modules` (file name -> source) in `folder`."""
    stem = f"{canonicalize_name(name).replace('-', '_')}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires
    )
    wheel = "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = [(path, textwrap.dedent(source).encode()) for path, source in modules.items()]
    meta = {"METADATA": metadata.encode(), "WHEEL": wheel.encode()}
    return _write(folder / f"{stem}-py3-none-any.whl", f"{stem}.dist-info", entries, meta)


def write_sdist(folder: Path, name: str, version: str, setup_py: str) -> Path:
    """A source distribution whose setup.py is `setup_py` (a build script)."""
    stem = f"{canonicalize_name(name).replace('-', '_')}-{version}"
    out = folder / f"{stem}.tar.gz"
    files = {
        "setup.py": textwrap.dedent(setup_py).encode(),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
    }
    with tarfile.open(out, "w:gz") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(f"{stem}/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def repack_installed(folder: Path, name: str) -> Path:
    """The installed distribution `name` packed back into a wheel (its RECORD's files under
    site-packages; scripts and caches left out)."""
    dist = importlib.metadata.distribution(name)
    dist_info = next(
        str(f).split("/")[0] for f in dist.files or [] if str(f).endswith(".dist-info/METADATA")
    )
    wheel_text = (dist.read_text("WHEEL") or "").splitlines()
    tag = next(line.split(":", 1)[1].strip() for line in wheel_text if line.startswith("Tag:"))
    skipped = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}

    def entries() -> Iterable[tuple[str, bytes]]:
        for file in dist.files or []:
            path = str(file)
            if path.startswith("..") or "__pycache__" in path or path.endswith(".pyc"):
                continue
            if path.startswith(f"{dist_info}/") and path.split("/", 1)[1] in skipped:
                continue
            yield path, Path(str(dist.locate_file(file))).read_bytes()

    stem = f"{canonicalize_name(name).replace('-', '_')}-{dist.version}"
    return _write(folder / f"{stem}-{tag}.whl", dist_info, entries(), {})
