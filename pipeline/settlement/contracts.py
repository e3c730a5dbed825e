"""The reward contracts' compiled artifacts, and the names of the errors they revert with.

`artifacts/*.json` are written by `contracts/compile.js` (solc-js, offline) from
`contracts/src/*.sol`; a test compiles again and fails on any difference.
"""

from __future__ import annotations

import ast
import json
from functools import cache
from pathlib import Path
from typing import Any

from pipeline.settlement.merkle import keccak256

ARTIFACTS_DIR = Path(__file__).parent / "artifacts"
TOKEN = "RewardToken"
DISTRIBUTOR = "CumulativeMerkleDistributor"
_REVERTED = "execution reverted: "


@cache
def artifact(name: str) -> dict[str, Any]:
    """`{"abi": [...], "bytecode": "0x…"}` of a contract."""
    data: dict[str, Any] = json.loads((ARTIFACTS_DIR / f"{name}.json").read_text())
    return data


@cache
def _error_selectors() -> dict[bytes, str]:
    selectors: dict[bytes, str] = {}
    for name in (TOKEN, DISTRIBUTOR):
        for entry in artifact(name)["abi"]:
            if entry["type"] == "error":
                types = ",".join(i["type"] for i in entry["inputs"])
                selectors[keccak256(f"{entry['name']}({types})".encode())[:4]] = entry["name"]
    return selectors


def revert_data(exc: BaseException) -> bytes | None:
    """The revert data of a failed call or transaction, as each backend reports it: anvil in
    `ContractCustomError.data` (hex), eth-tester in its message (a bytes literal)."""
    data = getattr(exc, "data", None)
    if isinstance(data, str) and data.startswith("0x"):
        return bytes.fromhex(data[2:])
    message = str(exc.args[0]) if exc.args else ""
    if message.startswith(_REVERTED):
        literal = message[len(_REVERTED) :]
        try:
            value = ast.literal_eval(literal)
        except (ValueError, SyntaxError):
            return None
        return value if isinstance(value, bytes) else None
    return None


def revert_reason(exc: BaseException) -> str:
    """The custom error's name (`InvalidProof`, `OwnableUnauthorizedAccount`, …), else the text."""
    data = revert_data(exc)
    if data is not None and len(data) >= 4 and data[:4] in _error_selectors():
        return _error_selectors()[data[:4]]
    return str(exc)
