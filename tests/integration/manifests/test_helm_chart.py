"""The Helm chart (``manifests/helm/edgehub``) with the pinned, Go-built Helm (``make
cluster-bins``): ``helm lint``, ``helm template`` with default and every optional value, objects
strictly valid, the same objects as ``manifests/`` for a release "edgehub" in edgehub-system,
Akri's value names doing what they do in Akri's chart, and the chart's copies of CRDs, RBAC
rules, alerts and dashboard equal to the originals; the hub as a YurtStaticSet per pool. The
install into a real cluster is ``tests/e2e/cluster/test_helm_real.py`` (in YurtStaticSet mode:
``test_helm_yurtstaticset_real.py``)."""

from __future__ import annotations

import json
import pathlib
import re
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
        (MANIFESTS / "hub" / "rbac.yaml", "Role"),
        (MANIFESTS / "hub" / "bootstrap-rbac.yaml", "Role"),
    ):
        want = one(path, kind)
        got = find(docs, kind, want["metadata"]["name"])
        assert got["rules"] == want["rules"], want["metadata"]["name"]
    for manifest in load(MANIFESTS / "manager" / "staticset-rbac.yaml"):  # two Roles
        if manifest.kind in ("ClusterRole", "Role"):
            got = find(docs, manifest.kind, manifest.name)
            assert got["rules"] == manifest.doc["rules"], manifest.name
            assert got["metadata"].get("namespace") == manifest.doc["metadata"].get("namespace")
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


def test_prometheus_enabled_annotates_every_part_the_hub_included() -> None:
    """A pod-annotation scraper finds the hub (its static Pod's mirror Pod: the node's IP, the
    annotated port, served by the metrics-only listener), the agent and the manager."""
    docs = render("--set", "prometheus.enabled=true,controller.enabled=true")
    hub = yaml.safe_load(
        find(docs, "ConfigMap", "edgehub-hub-static-pod")["data"]["edgehub-hub.yaml"]
    )
    templates = {
        "hub": hub,
        "agent": find(docs, "DaemonSet", "edgehub-agent")["spec"]["template"],
        "manager": find(docs, "Deployment", "edgehub-manager")["spec"]["template"],
    }
    for part, pod in templates.items():
        annotations = pod["metadata"].get("annotations", {})
        assert annotations.get("prometheus.io/scrape") == "true", part
        assert annotations.get("prometheus.io/path") == "/metrics", part
        ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert int(annotations["prometheus.io/port"]) in ports, part
    (container,) = hub["spec"]["containers"]
    assert "--metrics-bind-address=0.0.0.0" in container["command"]
    assert "--metrics-port=10266" in container["command"]
    assert hub["metadata"]["annotations"]["prometheus.io/port"] == "10266"
    plain = yaml.safe_load(
        find(render(), "ConfigMap", "edgehub-hub-static-pod")["data"]["edgehub-hub.yaml"]
    )
    assert "annotations" not in plain["metadata"]
    assert not any("--metrics-bind" in a for a in plain["spec"]["containers"][0]["command"])


def refusal(*values: str) -> str:
    done = helm(
        "template", "x", str(CHART), "--kube-version", KUBE_VERSION, *values, check=False
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    return done.stderr


@pytest.mark.parametrize(
    ("values", "path", "key"),
    [
        (["--set", "udev.discovery.hots=/x"], "/udev/discovery", "hots"),
        (["--set", "udev.discovery.host.udevv=/x"], "/udev/discovery/host", "udevv"),
        (["--set", "agent.hots.udev=/x"], "/agent", "hots"),
        (["--set", "debugEcho.configuration.sharde=false"], "/debugEcho/configuration", "sharde"),
        (["--set", "hub.staticPod.joinTokn=abcdef.0123456789abcdef"], "/hub/staticPod", "joinTokn"),
        (["--set", "controller.onlyOnControlPlane=true"], "/controller", "onlyOnControlPlane"),
        (["--set", "imagee.tag=v1"], "", "imagee"),
    ],
)
def test_the_schema_refuses_a_misspelt_value_naming_its_path(
    values: list[str], path: str, key: str
) -> None:
    err = refusal(*values)
    assert "values don't meet the specifications of the schema" in err, err
    assert f"at '{path}': additional properties '{key}' not allowed" in err, err


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (["--set", "hub.staticPod.joinToken=not-a-token"], "/hub/staticPod/joinToken"),
        (["--set", "controller.replicas=two"], "/controller/replicas"),
        (["--set", "hub.staticPod.caCertHash=md5:00"], "/hub/staticPod/caCertHash"),
    ],
)
def test_the_schema_refuses_a_wrong_type_or_shape(values: list[str], words: str) -> None:
    assert words in refusal(*values)


@pytest.mark.parametrize(
    ("akri", "ours"),
    [
        ("useDevelopmentContainers=false", "image.tag"),
        ("useLatestContainers=true", "image.tag"),
        ("prometheus.port=8080", "agent.metricsPort"),
    ],
)
def test_akri_values_we_do_not_take_are_refused_naming_ours(akri: str, ours: str) -> None:
    err = refusal("--set", akri)
    assert akri.split("=")[0] in err and ours in err, err


def test_akris_own_spellings_render_what_they_mean() -> None:
    docs = render(
        "--set", "udev.discovery.host.udev=/akri/udev",
        "--set", "debugEcho.discovery.enabled=true,debugEcho.configuration.shared=false",
        "--set", "agent.allowDebugEcho=true",
    )  # fmt: skip
    udev = pod_spec(find(docs, "DaemonSet", "edgehub-udev"))
    paths = {v["name"]: v["hostPath"]["path"] for v in udev["volumes"] if "hostPath" in v}
    assert paths["udev"] == "/akri/udev"
    # Akri's udev.discovery.host.udev is the handler's; the agent keeps agent.host.udev.
    agent = pod_spec(find(docs, "DaemonSet", "edgehub-agent"))
    paths = {v["name"]: v["hostPath"]["path"] for v in agent["volumes"] if "hostPath" in v}
    assert paths["udev"] == "/run/udev"
    for name in ("edgehub-debug-echo", "edgehub-agent"):
        env = {e["name"]: e.get("value") for e in pod_spec(find(docs, "DaemonSet", name))[
            "containers"][0]["env"]}  # fmt: skip
        assert env["DEBUG_ECHO_INSTANCES_SHARED"] == "false", name
    # Ours still works, and Akri's wins when both are given.
    docs = render("--set", "debugEcho.discovery.enabled=true,debugEcho.discovery.shared=false")
    env = pod_spec(find(docs, "DaemonSet", "edgehub-debug-echo"))["containers"][0]["env"]
    assert {"name": "DEBUG_ECHO_INSTANCES_SHARED", "value": "false"} in env
    docs = render(
        "--set", "debugEcho.discovery.enabled=true,debugEcho.discovery.shared=false",
        "--set", "debugEcho.configuration.shared=true",
    )  # fmt: skip
    env = pod_spec(find(docs, "DaemonSet", "edgehub-debug-echo"))["containers"][0]["env"]
    assert {"name": "DEBUG_ECHO_INSTANCES_SHARED", "value": "true"} in env


def test_an_akri_values_file_with_its_common_paths_is_accepted(tmp_path: pathlib.Path) -> None:
    values = tmp_path / "akri.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "imagePullSecrets": [{"name": "regcred"}],
                "rbac": {"enabled": True},
                "prometheus": {"enabled": True},
                "controller": {"enabled": True, "nodeSelectors": {"cloud": "yes"},
                               "image": {"repository": "r/c", "tag": "t", "pullPolicy": ""}},
                "agent": {"enabled": True, "allowDebugEcho": True,
                          "host": {"discoveryHandlers": "/var/lib/akri",
                                   "kubeletDevicePlugins": "/var/lib/kubelet/device-plugins"}},
                "udev": {"discovery": {"enabled": True, "host": {"udev": "/run/udev"},
                                       "image": {"repository": "r/u", "tag": "t"}},
                         "configuration": {"enabled": True, "name": "akri-udev",
                                           "discoveryDetails": {"udevRules": ['KERNEL=="video*"']},
                                           "brokerProperties": {}, "capacity": 1}},
                "debugEcho": {"discovery": {"enabled": True},
                              "configuration": {"enabled": True, "shared": False,
                                                "discoveryDetails": {"descriptions": ["a"]}}},
                "webhookConfiguration": {"enabled": True, "name": "akri-webhook-configuration",
                                         "caBundle": "Zm9v"},
            }
        )
    )  # fmt: skip
    docs = render("-f", str(values))
    udev = pod_spec(find(docs, "DaemonSet", "edgehub-udev"))
    assert udev["containers"][0]["image"] == "r/u:t"
    assert find(docs, "Configuration", "akri-udev")["spec"]["discoveryHandler"]["name"] == "udev"


def test_the_join_token_is_in_a_secret_and_never_in_the_configmap() -> None:
    token_id, secret = "e2e0ab", "0123456789abcdef"
    docs = render(
        "--set", f"hub.staticPod.joinToken={token_id}.{secret}",
        "--set", "hub.staticPod.joinTokenExpiration=2030-01-01T00:00:00Z",
    )  # fmt: skip
    for doc in docs:
        if doc["kind"] != "Secret":
            assert secret not in yaml.safe_dump(doc), (doc["kind"], doc["metadata"]["name"])
    static = find(docs, "ConfigMap", "edgehub-hub-static-pod")["data"]["edgehub-hub.yaml"]
    pod = yaml.safe_load(static)
    command = pod["spec"]["containers"][0]["command"]
    assert "--join-token-file=/var/lib/yurthub/join-token" in command
    assert not [a for a in command if a.startswith("--join-token=")]
    assert "JOIN_TOKEN" not in [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    token = find(docs, "Secret", f"bootstrap-token-{token_id}")
    assert token["metadata"]["namespace"] == "kube-system"
    assert token["type"] == "bootstrap.kubernetes.io/token"
    assert token["stringData"] == {
        "token-id": token_id,
        "token-secret": secret,
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "expiration": "2030-01-01T00:00:00Z",
    }
    # Without a token (the default) there is no Secret: never a well-known one in the cluster.
    assert not [d for d in render() if d["kind"] == "Secret"]
    err = refusal("--set", "hub.staticPod.joinToken=abcdef.0123456789abcdef")
    assert "hub.staticPod.joinToken is the well-known example token" in err


def test_every_value_a_template_names_is_in_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    named = {
        m.group(1)
        for t in (CHART / "templates").iterdir()
        for m in re.finditer(r"\.Values((?:\.[A-Za-z_]+)+)", t.read_text())
    }
    assert len(named) > 20
    for path in sorted(named):
        node = schema
        for key in path.strip(".").split("."):
            assert key in node.get("properties", {}), path
            node = node["properties"][key]


# -- the hub as one YurtStaticSet per pool (hub.yurtStaticSet)

POOLS = [
    "--set", "hub.yurtStaticSet.enabled=true",
    "--set", "hub.yurtStaticSet.pools[0].name=hangzhou",
    "--set", "hub.yurtStaticSet.pools[1].name=beijing",
    "--set", "hub.yurtStaticSet.pools[1].nodeSelector.site=bj",
    "--set", "hub.yurtStaticSet.pools[1].upgradeStrategy.type=OTA",
]  # fmt: skip


def _static_sets(docs: list[Any]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "YurtStaticSet"}


def test_yurtstaticset_mode_renders_one_per_pool_with_the_static_pods_template() -> None:
    docs = render(*POOLS, "--set", "image.tag=1.2.3")
    sets = _static_sets(docs)
    assert sorted(sets) == ["edgehub-hub-beijing", "edgehub-hub-hangzhou"]
    static = yaml.safe_load(
        find(render(), "ConfigMap", "edgehub-hub-static-pod")["data"]["edgehub-hub.yaml"]
    )
    for pool, selector, strategy in (
        ("hangzhou", None, "AdvancedRollingUpdate"),
        ("beijing", {"site": "bj"}, "OTA"),
    ):
        yss = sets[f"edgehub-hub-{pool}"]
        schema = crd_schema("YurtStaticSet")["properties"]["spec"]
        assert list(unknown_fields(yss["spec"], schema)) == [], yss
        assert yss["metadata"]["namespace"] == "kube-system"
        assert yss["metadata"]["annotations"]["edgehub.io/owner"] == "edgehub"
        spec = yss["spec"]
        assert spec["staticPodManifest"] == "edgehub-hub"
        assert spec["upgradeStrategy"]["type"] == strategy
        template = spec["template"]
        # The mirror Pod <yss>-<node> is what the controller finds the pool's nodes by.
        assert template["metadata"]["name"] == f"edgehub-hub-{pool}"
        assert template["metadata"]["labels"]["apps.openyurt.io/nodepool"] == pool
        # Only a pool's own nodeSelector: kubelet would refuse the hub on a node without it.
        assert template["spec"].pop("nodeSelector", None) == selector
        (hub,) = template["spec"]["containers"]
        assert hub["image"] == "ghcr.io/edgehub/edgehub:1.2.3"
        hub["image"] = static["spec"]["containers"][0]["image"]
        assert template["spec"] == static["spec"]
        assert lost_fields({"apiVersion": "v1", "kind": "Pod", **template}) == []
    assert sets["edgehub-hub-hangzhou"]["spec"]["upgradeStrategy"]["maxUnavailable"] == 1
    # The nodes' manifests come from the controller's ConfigMaps yurt-static-set-<yss> now.
    assert not [d for d in docs if d["metadata"]["name"] == "edgehub-hub-static-pod"]
    args = find(docs, "Deployment", "edgehub-manager")["spec"]["template"]["spec"]
    command = args["containers"][0]["args"]
    assert "--yurtstaticset-owner=edgehub" in command
    assert "--static-pod-upgrade-image=ghcr.io/edgehub/edgehub:1.2.3" in command


def test_helm_upgrade_with_a_new_tag_changes_only_the_templates_image() -> None:
    before = _static_sets(render(*POOLS, "--set", "image.tag=1.0.0"))
    after = _static_sets(render(*POOLS, "--set", "image.tag=1.1.0"))
    for name, yss in after.items():
        (hub,) = yss["spec"]["template"]["spec"]["containers"]
        assert hub["image"] == "ghcr.io/edgehub/edgehub:1.1.0"
        hub["image"] = "ghcr.io/edgehub/edgehub:1.0.0"
        assert yss == before[name], name


def test_the_static_pod_configmap_stays_the_default() -> None:
    docs = render()
    assert _static_sets(docs) == {}
    assert find(docs, "ConfigMap", "edgehub-hub-static-pod")
    command = find(docs, "Deployment", "edgehub-manager")["spec"]["template"]["spec"]
    assert "--yurtstaticset-owner=yurt-manager" in command["containers"][0]["args"]


def test_yurt_manager_may_roll_the_chart_yurtstaticsets_out_when_named_so() -> None:
    docs = render(*POOLS, "--set", "hub.yurtStaticSet.owner=yurt-manager")
    for yss in _static_sets(docs).values():
        assert yss["metadata"]["annotations"]["edgehub.io/owner"] == "yurt-manager"
    command = find(docs, "Deployment", "edgehub-manager")["spec"]["template"]["spec"]
    assert "--yurtstaticset-owner=yurt-manager" in command["containers"][0]["args"]


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (
            ["--set", "hub.yurtStaticSet.upgradeStrategy.type=Recreate"],
            "/hub/yurtStaticSet/upgradeStrategy/type",
        ),
        (
            ["--set", "hub.yurtStaticSet.pools[1].upgradeStrategy.maxUnavailable=lots"],
            "/hub/yurtStaticSet/pools/1/upgradeStrategy/maxUnavailable",
        ),
        (["--set", "hub.yurtStaticSet.pools[0].name=Bad_Pool"], "/hub/yurtStaticSet/pools/0/name"),
        (["--set", "hub.yurtStaticSet.poolz[0].name=a"], "poolz"),
    ],
)
def test_the_schema_refuses_a_bad_yurtstaticset_value(values: list[str], words: str) -> None:
    assert words in refusal(*POOLS, *values)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (
            ["--set", "controller.yurtStaticSetOwner=yurt-manager"],
            "controller.yurtStaticSetOwner=yurt-manager but hub.yurtStaticSet.owner=edgehub",
        ),
        (
            ["--set", "controller.controllers=csrapprover\\,brokers"],
            "controller.controllers does not run yurtstaticset",
        ),
        (["--set", "hub.yurtStaticSet.pools=null"], "hub.yurtStaticSet.pools: name a pool"),
        (["--set", "hub.yurtStaticSet.pools[1].name=hangzhou"], "pool hangzhou is named twice"),
    ],
)
def test_yurtstaticset_mode_refuses_an_owner_nobody_runs(values: list[str], words: str) -> None:
    assert words in refusal(*POOLS, *values)
