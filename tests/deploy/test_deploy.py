"""deploy/: the production topology parses and names only what the service really has."""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.main import build_parser
from pipeline.core.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
HELM_VALUES = DEPLOY / "helm" / "dagster-values.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
SETTINGS = {name.upper() for name in Settings.model_fields}


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def all_documents() -> Iterator[dict[str, Any]]:
    for path in MANIFESTS:
        yield from documents(path)


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", spec)
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def dockerfile_cmd() -> list[str]:
    match = re.search(r"^CMD (\[.*\])$", DOCKERFILE.read_text(), re.MULTILINE)
    assert match, "the Dockerfile has an exec-form CMD"
    return list(yaml.safe_load(match.group(1)))


def test_every_manifest_parses_with_kind_and_name() -> None:
    assert MANIFESTS, "deploy/k8s holds manifests"
    for path in [*MANIFESTS]:
        for doc in documents(path):
            assert doc.get("apiVersion") and doc.get("kind"), path.name
            assert doc.get("metadata", {}).get("name"), path.name
    assert isinstance(yaml.safe_load(HELM_VALUES.read_text()), dict)


def test_every_variable_the_manifests_set_is_a_setting() -> None:
    named: set[str] = set()
    for doc in all_documents():
        if doc["kind"] == "ConfigMap":
            named |= set(doc.get("data", {}))
        if doc["kind"] == "Secret":
            named |= set(doc.get("stringData", {})) | set(doc.get("data", {}))
        for container in containers(doc):
            named |= {env["name"] for env in container.get("env", [])}
    assert named, "the manifests configure the service"
    assert named <= SETTINGS, f"not settings of pipeline/core/config.py: {sorted(named - SETTINGS)}"


def test_config_and_secrets_are_split_and_secrets_are_placeholders() -> None:
    by_kind = {
        doc["kind"]: doc for doc in all_documents() if doc["kind"] in {"ConfigMap", "Secret"}
    }
    config, secret = by_kind["ConfigMap"]["data"], by_kind["Secret"]["stringData"]
    for name in ("JWT_SECRET", "ADMIN_TOKEN", "DATABASE_URL", "DAGSTER_PG_URL"):
        assert name in secret and name not in config
        assert "REPLACE-ME" in secret[name], f"{name} in the example is a placeholder"


def test_the_api_container_runs_the_images_own_serve_command() -> None:
    api = next(d for d in all_documents() if d["metadata"]["name"] == "marketplace-api")
    command = next(c for c in containers(api) if c["name"] == "api")["command"]
    cmd = dockerfile_cmd()
    assert command[:2] == cmd[:2] == ["marketplace", "serve"]
    parser = build_parser()
    for argv in (command, cmd):
        args = parser.parse_args(argv[1:])
        assert args.handler.__name__ == "cmd_serve"
        assert args.host == "0.0.0.0"
    migrate = next(c for c in containers(api) if c["name"] == "migrate")["command"]
    assert parser.parse_args(migrate[1:]).handler.__name__ == "cmd_db_upgrade"


def test_api_pods_drain_before_the_kubelet_kills_them() -> None:
    api = next(d for d in all_documents() if d["metadata"]["name"] == "marketplace-api")
    pod = api["spec"]["template"]["spec"]
    grace = Settings.model_fields["shutdown_grace_seconds"].default
    assert pod["terminationGracePeriodSeconds"] >= grace + 5
    assert pod["automountServiceAccountToken"] is False


def test_dockerfile_base_is_pinned_and_copies_what_exists() -> None:
    text = DOCKERFILE.read_text()
    base = re.search(r"^FROM (\S+)$", text, re.MULTILINE)
    assert base and re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base[1])
    for line in re.findall(r"^COPY (.+)$", text, re.MULTILINE):
        for source in shlex.split(line)[:-1]:
            assert (ROOT / source).exists(), f"COPY {source}: no such file"


def test_constraints_pin_every_dependency_as_pyproject_does() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    constraints = {
        name.lower().replace("_", "-"): version
        for name, version in re.findall(
            r"^([A-Za-z0-9_.\-]+)==(\S+)$", (DEPLOY / "constraints.txt").read_text(), re.MULTILINE
        )
    }
    for requirement in project["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]+\])?==(\S+)", requirement)
        assert match, f"{requirement} is pinned exactly"
        name = match[1].lower().replace("_", "-")
        assert constraints.get(name) == match[3], f"deploy/constraints.txt pins {name}=={match[3]}"


def test_helm_run_queue_limits_match_the_instance_config() -> None:
    values = yaml.safe_load(HELM_VALUES.read_text())
    queued = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    instance = yaml.safe_load((ROOT / "dagster.postgres.yaml").read_text())
    assert (
        queued["tagConcurrencyLimits"] == instance["concurrency"]["runs"]["tag_concurrency_limits"]
    )
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    deployment = values["dagster-user-deployments"]["deployments"][0]
    grpc = deployment["dagsterApiGrpcArgs"]
    workspace = yaml.safe_load((ROOT / "workspace.yaml").read_text())
    location = workspace["load_from"][0]["python_file"]
    assert grpc[grpc.index("--python-file") + 1] == location["relative_path"]
    workdir = re.search(r"^WORKDIR (\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert workdir and grpc[grpc.index("--working-directory") + 1] == workdir[1]


@pytest.mark.parametrize("part", ["dagsterWebserver", "dagsterDaemon"])
def test_dagster_processes_read_the_same_settings_as_the_api(part: str) -> None:
    values = yaml.safe_load(HELM_VALUES.read_text())
    assert values[part]["envConfigMaps"] == [{"name": "marketplace-config"}]
    assert values[part]["envSecrets"] == [{"name": "marketplace-secrets"}]
