"""deploy/: the production topology parses and names only what the service really has."""

from __future__ import annotations

import re
import shlex
import tomllib
from typing import Any

import pytest
import yaml

from cli.main import build_parser
from pipeline.core.config import Settings
from tests.deploy.support import (
    CONSTRAINTS,
    DEPLOY,
    DOCKERFILE,
    HELM_VALUES,
    MANIFESTS,
    ROOT,
    SETTINGS,
    all_documents,
    config_data,
    containers,
    dockerfile_env,
    dockerfile_instructions,
    documents,
    helm_values,
    of_kind,
)

# Variables of Python and pip themselves that the image may set beside the service's settings.
INTERPRETER_VARIABLES = re.compile(r"(PYTHON|PIP_)[A-Z0-9_]+")


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


def helm_env_names(node: Any) -> set[str]:
    """Variables set anywhere in the Helm values: `env` (a mapping or a list of {name, value}),
    the run launcher's `envVars` ("NAME=value" or "NAME")."""
    names: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, dict):
                names |= set(value)
            elif key == "env" and isinstance(value, list):
                names |= {item["name"] for item in value}
            elif key == "envVars":
                names |= {item.partition("=")[0] for item in value}
            else:
                names |= helm_env_names(value)
    elif isinstance(node, list):
        for item in node:
            names |= helm_env_names(item)
    return names


def commented_config_keys() -> set[str]:
    """Optional settings left commented out in config.yaml (`# NAME: "value"`)."""
    text = (DEPLOY / "k8s" / "config.yaml").read_text()
    return set(re.findall(r"^\s*#\s*([A-Z][A-Z0-9_]+):\s", text, re.MULTILINE))


def test_every_variable_the_deployment_sets_is_a_setting() -> None:
    named: set[str] = set()
    for doc in all_documents():
        if doc["kind"] == "ConfigMap":
            named |= set(doc.get("data", {}))
        if doc["kind"] == "Secret":
            named |= set(doc.get("stringData", {})) | set(doc.get("data", {}))
        for container in containers(doc):
            named |= {env["name"] for env in container.get("env", [])}
    named |= commented_config_keys()
    named |= {name for name in dockerfile_env() if not INTERPRETER_VARIABLES.fullmatch(name)}
    named |= helm_env_names(helm_values())
    assert named, "the manifests configure the service"
    assert named <= SETTINGS, f"not settings of pipeline/core/config.py: {sorted(named - SETTINGS)}"
    # The dask scheduler is the operator's to add: offered, commented out, in the ConfigMap.
    assert "VALUATION_CLUSTER_ADDRESS" in commented_config_keys()


def test_the_settings_check_reads_the_dockerfile_and_the_helm_values() -> None:
    assert dockerfile_env()["MARKETPLACE_DATA_DIR"] == "/var/lib/marketplace"
    sample = {
        "dagsterWebserver": {"env": {"A": "1"}},
        "deployments": [{"env": [{"name": "B", "value": "2"}]}],
        "k8sRunLauncher": {"envVars": ["C=3", "D"]},
    }
    assert helm_env_names(sample) == {"A", "B", "C", "D"}


def test_config_yaml_is_a_valid_set_of_settings() -> None:
    # Settings refuses TRAINER_PIPES_CLIENT=k8s without its image and claim, and bad values.
    Settings.model_validate({name.lower(): value for name, value in config_data().items()})


def env_sources_named() -> dict[str, set[str]]:
    """ConfigMap and Secret names the pods read: envFrom in the manifests, the Helm values'
    envConfigMaps/envSecrets wherever they are."""
    named: dict[str, set[str]] = {"ConfigMap": set(), "Secret": set()}
    for doc in all_documents():
        for container in containers(doc):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    named["ConfigMap"].add(source["configMapRef"]["name"])
                if "secretRef" in source:
                    named["Secret"].add(source["secretRef"]["name"])

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in {"envConfigMaps", "envSecrets"}:
                    kind = "ConfigMap" if key == "envConfigMaps" else "Secret"
                    named[kind] |= {item["name"] for item in value}
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(helm_values())
    return named


def test_pods_read_the_configmap_and_secret_that_are_defined() -> None:
    named = env_sources_named()
    for kind, names in named.items():
        defined = {doc["metadata"]["name"] for doc in of_kind(kind)}
        assert names, f"no pod reads a {kind}"
        assert names <= defined, f"{kind} read but not defined in deploy/k8s: {names - defined}"
    values = helm_values()
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    deployment = values["dagster-user-deployments"]["deployments"][0]
    # Every Dagster process, the run pods included, reads the API's settings.
    for part in (values["dagsterWebserver"], values["dagsterDaemon"], launcher, deployment):
        assert {item["name"] for item in part["envConfigMaps"]} == named["ConfigMap"]
        assert {item["name"] for item in part["envSecrets"]} == named["Secret"]


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


def pinned_constraints() -> dict[str, str]:
    return {
        name.lower().replace("_", "-"): version
        for name, version in re.findall(
            r"^([A-Za-z0-9_.\-]+)==(\S+)$", CONSTRAINTS.read_text(), re.MULTILINE
        )
    }


def exact_pin(requirement: str) -> tuple[str, str]:
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]+\])?==(\S+)", requirement)
    assert match, f"{requirement} is pinned exactly"
    return match[1].lower().replace("_", "-"), match[3]


def test_constraints_pin_every_dependency_as_pyproject_does() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    constraints = pinned_constraints()
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["k8s"]]:
        name, version = exact_pin(requirement)
        assert constraints.get(name) == version, f"deploy/constraints.txt pins {name}=={version}"


def test_the_image_installs_dagster_k8s_for_the_k8s_run_launcher() -> None:
    # The Helm values launch runs with dagster-k8s' K8sRunLauncher, in this image.
    assert helm_values()["runLauncher"]["type"] == "K8sRunLauncher"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = dict(exact_pin(r) for r in project["optional-dependencies"]["k8s"])
    default = dict(exact_pin(r) for r in project["dependencies"])
    # Dagster's libraries are released together: dagster-k8s at dagster-postgres' version.
    assert extra == {"dagster-k8s": default["dagster-postgres"]}
    assert "dagster-k8s" not in default, "dev env stays without it (tests/sandbox relies on it)"
    assert pinned_constraints()["dagster-k8s"] == default["dagster-postgres"]
    installs = [
        shlex.split(arguments.split("&&")[0])
        for instruction, arguments in dockerfile_instructions()
        if instruction == "RUN" and arguments.startswith("pip install")
    ]
    assert len(installs) == 1, "one pip install of the project"
    [install] = installs
    assert ".[k8s]" in install
    assert install[install.index("--constraint") + 1] == "deploy/constraints.txt"


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
    values = helm_values()
    assert values[part]["envConfigMaps"] == [{"name": "marketplace-config"}]
    assert values[part]["envSecrets"] == [{"name": "marketplace-secrets"}]
