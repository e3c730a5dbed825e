"""deploy/: the trainer sandbox (docs/sandbox.md, "Production") is wired as the settings and the
code expect, and every read-only container has somewhere to write its temp files."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from assets.trainers import TRAINER_LABEL, trainer_network_policy
from pipeline.core.config import Settings
from tests.deploy.support import (
    DEPLOY,
    HELM_VALUES,
    OPERATIONS,
    all_documents,
    config_data,
    containers,
    documents,
    helm_install_namespaces,
    helm_values,
    of_kind,
    pod_spec,
)

DEFAULTS = Settings.model_fields
TRAINER_SANDBOX = DEPLOY / "k8s" / "trainer-sandbox.yaml"


def release_namespace() -> str:
    """The namespace docs/operations.md installs the Dagster release into."""
    namespaces = helm_install_namespaces(OPERATIONS.read_text())
    assert namespaces, "docs/operations.md installs the Dagster release"
    assert None not in namespaces, "the doc's helm install names its namespace"
    [namespace] = set(namespaces)
    assert namespace is not None
    return namespace


def run_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    """The Dagster run pods' container and pod spec overrides (K8sRunLauncher runK8sConfig)."""
    run = helm_values()["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]
    return run["containerConfig"], run["podSpecConfig"]


def test_config_wires_the_trainer_pods() -> None:
    config = config_data()
    assert config["TRAINER_PIPES_CLIENT"] == "k8s"
    assert config["TRAINER_K8S_NAMESPACE"] == DEFAULTS["trainer_k8s_namespace"].default
    assert config["TRAINER_K8S_VOLUME_MOUNT"] == str(DEFAULTS["trainer_k8s_volume_mount"].default)
    # The trainer pods run the code location's own image (the launcher and harness paths).
    image = helm_values()["dagster-user-deployments"]["deployments"][0]["image"]
    assert config["TRAINER_K8S_IMAGE"] == f"{image['repository']}:{image['tag']}"
    [api] = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "marketplace-api"]
    assert {c["image"] for c in containers(api)} == {config["TRAINER_K8S_IMAGE"]}


def test_the_run_folder_claim_exists_where_both_pods_mount_it() -> None:
    claim = config_data()["TRAINER_K8S_VOLUME_CLAIM"]
    claims = {
        doc["metadata"]["namespace"]: doc
        for doc in of_kind("PersistentVolumeClaim")
        if doc["metadata"]["name"] == claim
    }
    # The run pods (the release's namespace) and the trainer pods mount a claim of that name.
    assert set(claims) == {release_namespace(), config_data()["TRAINER_K8S_NAMESPACE"]}
    volumes = {doc["metadata"]["name"]: doc for doc in of_kind("PersistentVolume")}
    sources = []
    for namespace, doc in claims.items():
        assert doc["spec"]["accessModes"] == ["ReadWriteMany"]
        volume = volumes[doc["spec"]["volumeName"]]["spec"]
        assert volume["claimRef"] == {"namespace": namespace, "name": claim}
        assert volume["accessModes"] == ["ReadWriteMany"]
        assert volume["storageClassName"] == doc["spec"]["storageClassName"] == ""
        sources.append(volume["nfs"])
    # Both claims are one share: what a run pod writes, its trainer pod reads.
    assert sources[0] == sources[1]


def test_run_pods_mount_the_claim_at_the_volume_mount() -> None:
    container, pod = run_pod()
    claimed = {
        volume["name"]
        for volume in pod["volumes"]
        if volume.get("persistentVolumeClaim", {}).get("claimName")
        == config_data()["TRAINER_K8S_VOLUME_CLAIM"]
    }
    mounts = {
        mount["mountPath"]
        for mount in container["volumeMounts"]
        if mount["name"] in claimed and not mount.get("readOnly") and "subPath" not in mount
    }
    assert mounts == {config_data()["TRAINER_K8S_VOLUME_MOUNT"]}


def test_trainer_sandbox_matches_the_code_and_the_settings() -> None:
    namespace = config_data()["TRAINER_K8S_NAMESPACE"]
    # The trainer sandbox's file (network-policy.yaml holds the marketplace namespace's own).
    sandbox = [
        doc for doc in documents(TRAINER_SANDBOX) if doc["kind"] in {"NetworkPolicy", "Role"}
    ]
    [policy] = [doc for doc in sandbox if doc["kind"] == "NetworkPolicy"]
    assert policy == trainer_network_policy(Settings().trainer_k8s_namespace)
    assert policy["spec"]["podSelector"]["matchLabels"] == TRAINER_LABEL
    [ns] = [d for d in of_kind("Namespace") if d["metadata"]["name"] == namespace]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {doc["metadata"]["namespace"] for doc in sandbox} == {namespace}


def test_the_run_pods_service_account_may_start_trainer_pods() -> None:
    namespace = config_data()["TRAINER_K8S_NAMESPACE"]
    [binding] = of_kind("RoleBinding")
    [role] = of_kind("Role")
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"] == namespace
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    [subject] = binding["subjects"]
    # The run pods take the code location's service account, which is global.serviceAccountName
    # when set (else the user-deployments chart's own default name, which no binding names); a
    # top-level serviceAccount.name covers the webserver and the daemon only.
    values = helm_values()
    assert subject["kind"] == "ServiceAccount"
    assert subject["name"] == values["global"]["serviceAccountName"]
    assert values["serviceAccount"].get("name", subject["name"]) == subject["name"]
    own = values["dagster-user-deployments"].get("serviceAccount", {})
    assert own.get("name", subject["name"]) == subject["name"]
    assert subject["namespace"] == release_namespace()
    # The install command in the values file's own header says the same.
    assert helm_install_namespaces(HELM_VALUES.read_text()) == [release_namespace()]


def test_the_services_objects_live_in_the_release_namespace() -> None:
    # The Dagster pods read the ConfigMap and Secret of their own namespace only.
    trainers = config_data()["TRAINER_K8S_NAMESPACE"]
    for doc in all_documents():
        if doc["kind"] in {"Namespace", "PersistentVolume"}:
            continue
        namespace = doc["metadata"].get("namespace")
        assert namespace in {release_namespace(), trainers}, doc["metadata"]["name"]
        if doc["kind"] in {"ConfigMap", "Secret", "Deployment", "Service"}:
            assert namespace == release_namespace(), doc["metadata"]["name"]


def writable_paths(container: dict[str, Any], volumes: list[dict[str, Any]]) -> set[str]:
    writable = {
        volume["name"]
        for volume in volumes
        if "emptyDir" in volume or "persistentVolumeClaim" in volume
    }
    return {
        mount["mountPath"]
        for mount in container.get("volumeMounts", [])
        if mount["name"] in writable and not mount.get("readOnly")
    }


def read_only_containers() -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(name, container, pod volumes) of every container with a read-only root in deploy/."""
    found = []
    for doc in all_documents():
        for container in containers(doc):
            found.append((container["name"], container, pod_spec(doc).get("volumes", [])))
    values = helm_values()
    for deployment in values["dagster-user-deployments"]["deployments"]:
        found.append((deployment["name"], deployment, deployment.get("volumes", [])))
    container, pod = run_pod()
    found.append(("dagster run", container, pod.get("volumes", [])))
    return [
        entry
        for entry in found
        if entry[1].get("securityContext", {}).get("readOnlyRootFilesystem")
    ]


def has_writable_temp(container: dict[str, Any], volumes: list[dict[str, Any]]) -> bool:
    paths = writable_paths(container, volumes)
    env = container.get("env", [])
    tmpdir = next((item["value"] for item in env if item["name"] == "TMPDIR"), "/tmp")
    return any(PurePosixPath(tmpdir).is_relative_to(path) for path in paths)


def test_read_only_containers_have_a_writable_temp_folder() -> None:
    # tempfile.mkdtemp (the PII scan's model, S3 downloads) fails on a read-only /tmp.
    found = read_only_containers()
    assert "api" in {name for name, _, _ in found}
    for name, container, volumes in found:
        assert has_writable_temp(container, volumes), f"{name}: /tmp (or TMPDIR) is read-only"


def mounted(name: str, path: str, **extra: Any) -> dict[str, Any]:
    return {"volumeMounts": [{"name": name, "mountPath": path, **extra}]}


EMPTY = [{"name": "v", "emptyDir": {}}]


@pytest.mark.parametrize(
    ("container", "volumes", "expected"),
    [
        (mounted("v", "/tmp"), EMPTY, True),
        (mounted("v", "/data"), EMPTY, False),
        ({**mounted("v", "/data"), "env": [{"name": "TMPDIR", "value": "/data/tmp"}]}, EMPTY, True),
        (mounted("v", "/tmp", readOnly=True), EMPTY, False),
        (mounted("v", "/tmp"), [{"name": "v", "configMap": {"name": "c"}}], False),
    ],
)
def test_the_temp_folder_check(
    container: dict[str, Any], volumes: list[dict[str, Any]], expected: bool
) -> None:
    assert has_writable_temp(container, volumes) is expected
