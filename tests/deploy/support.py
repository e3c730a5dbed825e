"""Readers of deploy/ and docs/operations.md shared by the deploy tests."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from pipeline.core.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
HELM_VALUES = DEPLOY / "helm" / "dagster-values.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
CONSTRAINTS = DEPLOY / "constraints.txt"
OPERATIONS = ROOT / "docs" / "operations.md"
SETTINGS = {name.upper() for name in Settings.model_fields}


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def all_documents() -> Iterator[dict[str, Any]]:
    for path in MANIFESTS:
        yield from documents(path)


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in all_documents() if doc["kind"] == kind]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc.get("spec", {})
    return spec.get("template", {}).get("spec", spec)


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    pod = pod_spec(doc)
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def helm_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(HELM_VALUES.read_text())
    return values


def config_data() -> dict[str, str]:
    [config] = of_kind("ConfigMap")
    data: dict[str, str] = config["data"]
    return data


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [
        (match[1].upper(), match[2].strip())
        for match in re.finditer(r"^(\w+)\s+(.*)$", joined, re.MULTILINE)
    ]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, arguments in dockerfile_instructions():
        if instruction == "ENV":
            for word in shlex.split(arguments):
                name, _, value = word.partition("=")
                env[name] = value
    return env


def helm_install_namespaces(text: str) -> list[str | None]:
    """The `--namespace` of each `helm upgrade --install dagster` command in `text` (markdown or
    a YAML comment; None for a command without one)."""
    flat = " ".join(text.replace("\\\n", " ").replace("\n#", "\n").split())
    commands = re.findall(r"helm upgrade --install dagster [^`;&|]*?-f deploy/helm/\S+", flat)
    return [
        match[1] if (match := re.search(r"--namespace[ =](\S+)", command)) else None
        for command in commands
    ]
