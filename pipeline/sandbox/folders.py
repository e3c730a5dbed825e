"""A model's folder: its definition file and training code, packed, hashed and stored.

`marketplace models add DIR` reads `DIR/model.json` (or `model.yaml`/`model.yml`), whose
`trainer` ("module:function", e.g. "train:fit") names a function of a Python file of the
folder. The folder is checked without running any of it (the entry point's file must exist
and define the function at top level), packed into a tar archive with fixed metadata (same
files, same bytes, same hash) and stored under `trainers/{model_id}/{sha256}.tar`; the
model row keeps the hash, so the code a valuation ran is known by its content.

Only regular files are packed: a symbolic link or a special file is refused (it could point
at anything on the registering machine); `__pycache__`, `*.pyc` and dot-files are left out.
Extraction uses tarfile's `data` filter (no absolute paths, no `..`, no links out).
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.core.errors import InvalidInput

DEFINITION_FILES = ("model.json", "model.yaml", "model.yml")
MAX_FOLDER_BYTES = 20 * 1024 * 1024
MAX_FOLDER_FILES = 500
ENTRY_PATTERN = re.compile(
    r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):([A-Za-z_]\w*)$"
)


def trainer_key(model_id: int, sha256: str) -> str:
    return f"trainers/{model_id}/{sha256}.tar"


def definition_file(folder: Path) -> Path:
    """The folder's model definition file."""
    for name in DEFINITION_FILES:
        if (folder / name).is_file():
            return folder / name
    raise InvalidInput(f"{folder}: no model definition ({' or '.join(DEFINITION_FILES)})")


def parse_entry(entry: str) -> tuple[str, str]:
    """("module", "function") of a trainer entry point such as "train:fit"."""
    match = ENTRY_PATTERN.match(entry)
    if match is None:
        raise InvalidInput(
            f"model definition: trainer {entry!r} must be module:function, e.g. 'train:fit'"
        )
    return match.group(1), match.group(2)


def check_entry(folder: Path, entry: str) -> None:
    """The entry point's file exists in the folder and defines the function at top level.

    Read as text and parsed, never imported: the code runs only in the sandbox.
    """
    module, function = parse_entry(entry)
    path = folder.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise InvalidInput(f"trainer {entry!r}: {path.relative_to(folder)} is not in the folder")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"trainer {entry!r}: {path.name} is not valid Python: {exc}") from None
    defined = {
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    if function not in defined:
        raise InvalidInput(f"trainer {entry!r}: {path.name} defines no function {function!r}")


def _members(folder: Path) -> list[Path]:
    files: list[Path] = []
    total = 0
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        if path.is_symlink():
            raise InvalidInput(f"{relative}: symbolic links are not allowed in a model folder")
        if path.is_dir():
            continue
        if not path.is_file():
            raise InvalidInput(f"{relative}: only regular files are allowed in a model folder")
        if path.suffix == ".pyc":
            continue
        files.append(path)
        total += path.stat().st_size
    if len(files) > MAX_FOLDER_FILES or total > MAX_FOLDER_BYTES:
        raise InvalidInput(
            f"a model folder holds at most {MAX_FOLDER_FILES} files and "
            f"{MAX_FOLDER_BYTES // (1024 * 1024)} MB"
        )
    return files


def pack_folder(folder: Path) -> tuple[bytes, str]:
    """The folder as a reproducible tar archive, and the archive's SHA-256 (its version)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _members(folder):
            data = path.read_bytes()
            info = tarfile.TarInfo(path.relative_to(folder).as_posix())
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    archive = buffer.getvalue()
    return archive, hashlib.sha256(archive).hexdigest()


@contextmanager
def extracted(archive: bytes) -> Iterator[Path]:
    """The archive unpacked into a private temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="mk-model-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)
