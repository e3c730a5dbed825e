"""The npm side of settlement for tests: where contracts/ and its node_modules are, or a skip."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import IN_CI

CONTRACTS_DIR = Path(__file__).resolve().parents[2] / "contracts"
NODE_MODULES = CONTRACTS_DIR / "node_modules"


def require_node_modules() -> str:
    """The `node` executable, once `npm ci` has run in contracts/; otherwise skip (fail in CI)."""
    node = shutil.which("node")
    problem = None
    if node is None:
        problem = "Node.js is not installed"
    elif not (NODE_MODULES / "solc").is_dir():
        problem = "contracts/node_modules is missing: run `make contracts` (npm ci)"
    if problem is None:
        assert node is not None
        return node
    if IN_CI:
        pytest.fail(f"{problem} (CI=true: a missing tool is a failure)")
    pytest.skip(problem)
