"""The production topology authenticates the Dagster UI and restricts traffic between pods.

Issue 34, cases 2, 3 and 9: Dagster's webserver has no authentication, so in deploy/ nothing may
reach it but a login proxy (oauth2-proxy, deploy/k8s/dagster-auth.yaml), itself reached through
the ingress only; every pod of namespace marketplace is behind a NetworkPolicy that admits only
what it serves; the dask cluster the ConfigMap offers speaks mutual TLS. Read from the
manifests and the Helm values as Kubernetes would match them.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.core.config import Settings
from tests.deploy.support import (
    DEPLOY,
    all_documents,
    config_data,
    containers,
    helm_values,
    of_kind,
    pod_spec,
)

NAMESPACE = "marketplace"
RELEASE = "dagster"  # `helm upgrade --install dagster …` (docs/operations.md)
INGRESS_NAMESPACE = {"kubernetes.io/metadata.name": "ingress-nginx"}
# Labels Dagster's chart puts on the pods of release RELEASE (its selectorLabels + component).
WEBSERVER_POD = {"app.kubernetes.io/name": "dagster", "app.kubernetes.io/instance": RELEASE,
                 "component": "dagster-webserver"}  # fmt: skip
CODE_LOCATION_POD = {"app.kubernetes.io/name": "dagster-user-deployments",
                     "app.kubernetes.io/instance": RELEASE, "component": "user-deployments",
                     "deployment": "marketplace"}  # fmt: skip
DAEMON_POD = {"app.kubernetes.io/name": "dagster", "app.kubernetes.io/instance": RELEASE,
              "component": "dagster-daemon"}  # fmt: skip
# dagster-k8s labels every run pod with these.
RUN_POD = {"app.kubernetes.io/name": "dagster", "app.kubernetes.io/instance": RELEASE,
           "app.kubernetes.io/component": "run_worker"}  # fmt: skip


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels only; an empty one selects all) matches labels."""
    assert set(selector) <= {"matchLabels"}, "only matchLabels is used here"
    wanted = selector.get("matchLabels", {})
    return all(labels.get(key) == value for key, value in wanted.items())


def policies() -> list[dict[str, Any]]:
    return [p for p in of_kind("NetworkPolicy") if p["metadata"]["namespace"] == NAMESPACE]


def peer_admits(
    peer: dict[str, Any], source: dict[str, str] | None, source_namespace: dict[str, str] | None
) -> bool:
    """Whether one `from` peer of a rule matches the source (a pod here, or a namespace)."""
    if "namespaceSelector" in peer:
        if "podSelector" in peer or source_namespace is None:
            return False  # not used here: a pod of another namespace needs both to match
        return selects(peer["namespaceSelector"], source_namespace)
    return source is not None and selects(peer["podSelector"], source)


def admitted(pod: dict[str, str], port: int, *, source: dict[str, str] | None = None,
             source_namespace: dict[str, str] | None = None) -> bool:  # fmt: skip
    """Whether the policies let a pod with labels `source` (in this namespace), or any pod of
    the namespace labelled `source_namespace`, reach `pod` on `port`."""
    chosen = [p for p in policies() if selects(p["spec"]["podSelector"], pod)]
    assert chosen, f"no NetworkPolicy selects {pod}"
    for policy in chosen:
        assert "Ingress" in policy["spec"]["policyTypes"]
        for rule in policy["spec"].get("ingress", []):
            if port not in {p["port"] for p in rule.get("ports", [])}:
                continue
            if any(peer_admits(peer, source, source_namespace) for peer in rule["from"]):
                return True
    return False


def deployment(name: str) -> dict[str, Any]:
    [found] = [d for d in of_kind("Deployment") if d["metadata"]["name"] == name]
    return found


def pod_labels(name: str) -> dict[str, str]:
    labels: dict[str, str] = deployment(name)["spec"]["template"]["metadata"]["labels"]
    return labels


def test_every_pod_of_the_namespace_is_denied_by_default() -> None:
    [deny] = [p for p in policies() if p["spec"]["podSelector"] == {}]
    assert deny["spec"]["policyTypes"] == ["Ingress"] and deny["spec"]["ingress"] == []
    for doc in all_documents():
        if doc["kind"] == "Deployment" and doc["metadata"]["namespace"] == NAMESPACE:
            named = [p for p in policies() if p["spec"]["podSelector"] != {}]
            assert any(selects(p["spec"]["podSelector"], pod_labels(doc["metadata"]["name"]))
                       for p in named), doc["metadata"]["name"]  # fmt: skip


def test_the_api_is_reached_from_the_ingress_controller_only() -> None:
    api = pod_labels("marketplace-api")
    assert admitted(api, 8000, source_namespace=INGRESS_NAMESPACE)
    for other in (WEBSERVER_POD, RUN_POD, pod_labels("dagster-webserver-auth")):
        assert not admitted(api, 8000, source=other)
    assert not admitted(api, 8000, source_namespace={"kubernetes.io/metadata.name": "default"})


def test_the_dagster_webserver_is_reached_through_the_login_proxy_only() -> None:
    proxy = pod_labels("dagster-webserver-auth")
    port = helm_values()["dagsterWebserver"]["service"]["port"]
    assert admitted(WEBSERVER_POD, port, source=proxy)
    # Not from the ingress directly, nor from the API, the run pods or the code location.
    assert not admitted(WEBSERVER_POD, port, source_namespace=INGRESS_NAMESPACE)
    for other in (pod_labels("marketplace-api"), RUN_POD, CODE_LOCATION_POD, DAEMON_POD):
        assert not admitted(WEBSERVER_POD, port, source=other)
    # The proxy itself is reached from the ingress controller only.
    assert admitted(proxy, 4180, source_namespace=INGRESS_NAMESPACE)
    assert not admitted(proxy, 4180, source=pod_labels("marketplace-api"))


def test_the_code_location_serves_the_release_s_pods_only() -> None:
    port = helm_values()["dagster-user-deployments"]["deployments"][0]["port"]
    for client in (WEBSERVER_POD, DAEMON_POD, RUN_POD):
        assert admitted(CODE_LOCATION_POD, port, source=client)
    assert not admitted(CODE_LOCATION_POD, port, source=pod_labels("marketplace-api"))
    assert not admitted(CODE_LOCATION_POD, port, source=pod_labels("dagster-webserver-auth"))


def test_the_login_proxy_signs_people_in_and_forwards_to_the_webserver_service() -> None:
    [proxy] = containers(deployment("dagster-webserver-auth"))
    args = dict(arg.removeprefix("--").partition("=")[::2] for arg in proxy["args"])
    web = helm_values()["dagsterWebserver"]["service"]
    # The chart names the webserver's Service `<release>-webserver`.
    assert (
        args["upstream"]
        == f"http://{RELEASE}-webserver.{NAMESPACE}.svc.cluster.local:{web['port']}/"
    )
    assert web["type"] == "ClusterIP"
    assert args["provider"] == "oidc" and args["oidc-issuer-url"].startswith("https://")
    # A page of another site cannot send a request that carries the session (CSRF).
    assert args["cookie-samesite"] == "strict" and args["cookie-secure"] == "true"
    # Its secrets are a mounted file, not environment variables.
    assert "env" not in proxy and "envFrom" not in proxy
    config = args["config"]
    mounts = {m["name"]: m for m in proxy["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(deployment("dagster-webserver-auth"))["volumes"]}
    [mount] = [m for m in mounts.values() if config.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True and "secret" in volumes[mount["name"]]


def test_the_ui_s_only_way_in_is_the_login_proxy() -> None:
    assert helm_values()["ingress"]["enabled"] is False
    ingresses = [i for i in of_kind("Ingress") if i["metadata"]["namespace"] == NAMESPACE]
    backends = {
        path["backend"]["service"]["name"]
        for ingress in ingresses
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    }
    assert backends == {"dagster-webserver-auth"}
    assert all(ingress["spec"].get("tls") for ingress in ingresses)
    services = {s["metadata"]["name"]: s for s in of_kind("Service")}
    assert selects({"matchLabels": services["dagster-webserver-auth"]["spec"]["selector"]},
                   pod_labels("dagster-webserver-auth"))  # fmt: skip


def test_the_dask_cluster_the_config_offers_is_authenticated() -> None:
    text = (DEPLOY / "k8s" / "config.yaml").read_text()
    offered = dict(re.findall(r'^\s*#\s*(VALUATION_CLUSTER_[A-Z_]+):\s*"([^"]*)"', text, re.M))
    assert offered["VALUATION_CLUSTER_ADDRESS"].startswith("tls://")
    values = {name.lower(): value for name, value in {**config_data(), **offered}.items()}
    settings = Settings.model_validate(values)  # a plain tcp:// scheduler would be refused
    assert settings.marketplace_mode == "production"
    assert settings.valuation_cluster_tls_cert_file is not None
