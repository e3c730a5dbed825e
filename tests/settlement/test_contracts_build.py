"""The committed ABI and bytecode are what contracts/src compiles to (solc-js, offline)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from pipeline.settlement.contracts import ARTIFACTS_DIR
from tests.support.contracts import CONTRACTS_DIR, require_node_modules


def _check(node: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node, "compile.js", "--check"], cwd=folder, capture_output=True, text=True, timeout=120
    )


def test_committed_artifacts_are_what_the_sources_compile_to() -> None:
    node = require_node_modules()
    result = _check(node, CONTRACTS_DIR)
    assert result.returncode == 0, result.stderr
    for name in ("RewardToken", "CumulativeMerkleDistributor"):
        artifact = json.loads((ARTIFACTS_DIR / f"{name}.json").read_text())
        assert artifact["evmVersion"] == "cancun"
        assert artifact["compiler"].startswith("solc 0.8.37")
        assert artifact["bytecode"].startswith("0x60") and len(artifact["bytecode"]) > 2000


def test_check_fails_when_a_committed_artifact_differs(tmp_path: Path) -> None:
    node = require_node_modules()
    copy = tmp_path / "contracts"
    shutil.copytree(CONTRACTS_DIR, copy, ignore=shutil.ignore_patterns("node_modules"))
    (copy / "node_modules").symlink_to(CONTRACTS_DIR / "node_modules")
    artifacts = tmp_path / "pipeline" / "settlement" / "artifacts"
    shutil.copytree(ARTIFACTS_DIR, artifacts)
    artifact = artifacts / "RewardToken.json"
    data = json.loads(artifact.read_text())
    data["bytecode"] = data["bytecode"][:-2] + ("00" if data["bytecode"][-2:] != "00" else "01")
    artifact.write_text(json.dumps(data, indent=2) + "\n")

    result = _check(node, copy)

    assert result.returncode == 1
    assert "pipeline/settlement/artifacts/RewardToken.json differs" in result.stderr
