"""The Helm chart (``manifests/helm/edgehub``) with the pinned, Go-built Helm (``make
cluster-bins``): ``helm lint``, ``helm template`` with default and every optional value, objects
strictly valid, the same objects as ``manifests/`` for a release "edgehub" in edgehub-system,
Akri's value names doing what they do in Akri's chart, and the chart's copies of CRDs, RBAC
rules, alerts and dashboard equal to the originals. The install into a real cluster is
``tests/e2e/cluster/test_helm_real.py``."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml
from manifests_support import (
    MANIFESTS,
    STATIC_POD,
    crd_schema,
    load,
    lost_fields,
    one,
    pod_spec,
    unknown_fields,
)

CHART = MANIFESTS / "helm" / "edgehub"
BUILD = pathlib.Path(__file__).resolve().parents[2] / "cluster" / "build.py"
KUBE_VERSION = "1.37.2"
EVERYTHING = [
    "--set", "webhookConfiguration.enabled=true",
    "--set", "webhookConfiguration.caBundle=Zm9v",
    "--set", "prometheus.enabled=true,prometheus.rules=true,prometheus.dashboard=true",
    "--set", "debugEcho.discovery.enabled=true,debugEcho.configuration.enabled=true",
    "--set", "debugEcho.configuration.brokerPod.image.repository=nginx",
    "--set", "udev.configuration.enabled=true,opcua.configuration.enabled=true",
    "--set", "onvif.configuration.enabled=true,agent.allowDebugEcho=true",
]  # fmt: skip


def helm_binary() -> str:
    path = subprocess.run(
        [sys.executable, str(BUILD), "--print-helm"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not pathlib.Path(path).is_file():
        pytest.fail(f"no helm at {path}: run `make cluster-bins`", pytrace=False)
    return path


HELM = helm_binary()


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60, check=False)
    if check:
        assert done.returncode == 0, done.stderr + done.stdout
    return done


def render(*values: str, release: str = "edgehub", namespace: str = "edgehub-system") -> list[Any]:
    out = helm(
        "template", release, str(CHART), "-n", namespace, "--kube-version", KUBE_VERSION, *values
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def find(docs: list[Any], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return dict(found)


def test_lint_default_and_everything_enabled() -> None:
    helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION)
    helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *EVERYTHING)


def test_every_rendered_object_is_strictly_valid() -> None:
    docs = render(*EVERYTHING)
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Configuration", "DaemonSet",
        "Deployment", "PrometheusRule", "Role", "RoleBinding", "Service", "ServiceAccount",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
    ]  # fmt: skip
    for doc in docs:
        if doc["kind"] == "Configuration":
            assert list(unknown_fields(doc, crd_schema("Configuration"))) == [], doc
        elif doc["kind"] != "PrometheusRule":
            assert lost_fields(doc) == [], doc["metadata"]["name"]
    pod = yaml.safe_load(
        find(docs, "ConfigMap", "edgehub-hub-static-pod")["data"]["edgehub-hub.yaml"]
    )
    assert lost_fields(pod) == []


def _same_pod(chart: dict[str, Any], manifest: dict[str, Any]) -> None:
    got, want = pod_spec(chart), pod_spec(manifest)
    # Selectors carry the release name in the chart: everything else is the same.
    got.pop("affinity", None)
    want.pop("affinity", None)
    assert got == want


def test_release_edgehub_renders_the_plain_manifests() -> None:
    docs = render("--set", "debugEcho.discovery.enabled=true")
    agent = one(MANIFESTS / "discovery" / "agent.yaml", "DaemonSet")
    _same_pod(find(docs, "DaemonSet", "edgehub-agent"), agent)
    for handler in ("udev", "opcua", "onvif", "debug-echo"):
        manifest = one(MANIFESTS / "discovery" / "handlers" / f"{handler}.yaml", "DaemonSet")
        _same_pod(find(docs, "DaemonSet", f"edgehub-{handler}"), manifest)
    manager = one(MANIFESTS / "manager" / "deployment.yaml", "Deployment")
    _same_pod(find(docs, "Deployment", "edgehub-manager"), manager)
    assert find(docs, "Deployment", "edgehub-manager")["spec"]["replicas"] == 2
    static = find(docs, "ConfigMap", "edgehub-hub-static-pod")["data"]["edgehub-hub.yaml"]
    assert yaml.safe_load(static)["spec"] == one(STATIC_POD, "Pod")["spec"]
    for path, kind in (
        (MANIFESTS / "hub" / "rbac.yaml", "ClusterRole"),
        (MANIFESTS / "discovery" / "agent-rbac.yaml", "ClusterRole"),
        (MANIFESTS / "manager" / "rbac.yaml", "ClusterRole"),
        (MANIFESTS / "manager" / "rbac.yaml", "Role"),
        (MANIFESTS / "manager" / "autonomy-rbac.yaml", "ClusterRole"),
        (MANIFESTS / "manager" / "hubleader-rbac.yaml", "ClusterRole"),
        (MANIFESTS / "manager" / "hubleader-rbac.yaml", "Role"),
        (MANIFESTS / "manager" / "staticset-rbac.yaml", "ClusterRole"),
        (MANIFESTS / "manager" / "staticset-rbac.yaml", "Role"),
        (MANIFESTS / "hub" / "rbac.yaml", "Role"),
        (MANIFESTS / "hub" / "bootstrap-rbac.yaml", "Role"),
    ):
        want = one(path, kind)
        got = find(docs, kind, want["metadata"]["name"])
        assert got["rules"] == want["rules"], want["metadata"]["name"]
    for manifest in (
        load(MANIFESTS / "hub" / "rbac.yaml")
        + load(MANIFESTS / "hub" / "bootstrap-rbac.yaml")
        + load(MANIFESTS / "hub" / "multiplexer-rbac.yaml")
    ):
        if manifest.kind.endswith("Binding"):
            got = find(docs, manifest.kind, manifest.name)
            assert (got["roleRef"], got["subjects"]) == (
                manifest.doc["roleRef"],
                manifest.doc["subjects"],
            )
    for manifest in load(MANIFESTS / "manager" / "autonomy-policy.yaml"):
        got = find(docs, manifest.kind, manifest.name)
        assert got["spec"] == manifest.doc["spec"], manifest.name
    cfg = find(docs, "ConfigMap", "yurt-hub-cfg")
    assert cfg["data"] == one(MANIFESTS / "hub" / "yurt-hub-cfg.yaml", "ConfigMap")["data"]
    assert cfg["metadata"]["labels"]["openyurt.io/configmap-name"] == "yurt-hub-cfg"


def test_akri_value_names_do_what_they_do_in_akris_chart() -> None:
    docs = render(
        "--set", "agent.host.discoveryHandlers=/opt/akri",
        "--set", "agent.host.kubeletDevicePlugins=/k/device-plugins",
        "--set", "agent.nodeSelectors.edge=yes,controller.nodeSelectors.cloud=yes",
        "--set", "imagePullSecrets[0].name=regcred",
        "--set", "agent.image.repository=mirror/agent,agent.image.tag=v9",
        "--set", "controller.allowOnControlPlane=false,udev.discovery.enabled=false",
        "--set", "rbac.enabled=false",
    )  # fmt: skip
    agent = pod_spec(find(docs, "DaemonSet", "edgehub-agent"))
    paths = {v["name"]: v["hostPath"]["path"] for v in agent["volumes"] if "hostPath" in v}
    assert paths["discovery-handlers"] == "/opt/akri"
    assert paths["device-plugins"] == "/k/device-plugins"
    assert "--device-plugins-dir=/k/device-plugins" in agent["containers"][0]["args"]
    assert agent["nodeSelector"] == {"kubernetes.io/os": "linux", "edge": "yes"}
    assert agent["imagePullSecrets"] == [{"name": "regcred"}]
    assert agent["containers"][0]["image"] == "mirror/agent:v9"
    assert "serviceAccountName" not in agent
    onvif = pod_spec(find(docs, "DaemonSet", "edgehub-onvif"))
    assert onvif["volumes"][0]["hostPath"]["path"] == "/opt/akri"
    assert onvif["containers"][0]["image"] == "ghcr.io/edgehub/edgehub:0.1.0"
    manager = pod_spec(find(docs, "Deployment", "edgehub-manager"))
    assert manager["nodeSelector"] == {"kubernetes.io/os": "linux", "cloud": "yes"}
    assert "tolerations" not in manager
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ServiceAccount")]
    assert not [d for d in docs if d["metadata"]["name"] == "edgehub-udev"]


def test_the_webhook_needs_its_ca_and_cert_manager_fills_it() -> None:
    refused = helm(
        "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "webhookConfiguration.enabled=true", check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "needs webhookConfiguration.caBundle or webhookConfiguration.certManager" in (
        refused.stderr
    )
    docs = render(
        "--set", "webhookConfiguration.enabled=true,webhookConfiguration.certManager.enabled=true",
        "--set", "webhookConfiguration.certManager.issuerRef.name=ca-issuer",
    )  # fmt: skip
    cert = find(docs, "Certificate", "edgehub-manager-webhook")
    assert cert["spec"]["dnsNames"] == ["edgehub-manager-webhook.edgehub-system.svc"]
    assert cert["spec"]["secretName"] == "edgehub-manager-webhook-tls"
    hook = find(docs, "ValidatingWebhookConfiguration", "edgehub-configurations.akri.sh")
    assert hook["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "edgehub-system/edgehub-manager-webhook"
    }
    want = one(MANIFESTS / "manager" / "webhook.yaml", "ValidatingWebhookConfiguration")
    assert hook["webhooks"][0]["rules"] == want["webhooks"][0]["rules"]
    assert (
        hook["webhooks"][0]["clientConfig"]["service"]
        == (want["webhooks"][0]["clientConfig"]["service"])
    )


def test_the_charts_copies_are_the_originals() -> None:
    policy = MANIFESTS / "manager" / "autonomy-policy.yaml"
    assert (CHART / "files" / "autonomy-policy.yaml").read_bytes() == policy.read_bytes()
    for crd in sorted((MANIFESTS / "crds").glob("*.yaml")):
        assert (CHART / "crds" / crd.name).read_bytes() == crd.read_bytes(), crd.name
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(
        p.name for p in (MANIFESTS / "crds").glob("*.yaml")
    )
    dashboards = MANIFESTS / "dashboards"
    assert json.loads((CHART / "files" / "edgehub-dashboard.json").read_text()) == json.loads(
        (dashboards / "edgehub.json").read_text()
    )
    alerts = yaml.safe_load((dashboards / "alerts.yaml").read_text())
    assert yaml.safe_load((CHART / "files" / "alert-groups.yaml").read_text()) == alerts["spec"]
    rules = yaml.safe_load((CHART / "files" / "manager-rules.yaml").read_text())
    assert rules == one(MANIFESTS / "manager" / "rbac.yaml", "ClusterRole")["rules"]
    docs = render("--set", "prometheus.rules=true,prometheus.dashboard=true")
    assert find(docs, "PrometheusRule", "edgehub")["spec"] == alerts["spec"]
    board = find(docs, "ConfigMap", "edgehub-dashboard")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["edgehub.json"])["uid"] == "edgehub-overview"
