"""What the manifests promise, checked against the code they deploy.

* The hub's static Pod keeps the DESIGN contract (ports, probes, resources, mounts) and its
  command is parsed by the real ``edgehub hub`` command into the settings it claims.
* Every flag a manifest passes exists in the installed binary's ``--help`` (run for real), and
  every container's command line parses with its manifest environment (kubelet's ``$(VAR)``
  expansion applied), so a typo or a renamed flag fails here, not on a node.
* kubelet's kubeconfig points at the hub's proxy; yurt-hub-cfg caches the agent; RBAC,
  mounts and images fit together; each sample Configuration parses with its real handler.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from edgehub import agent as agent_command
from edgehub import handler as handler_command
from edgehub import hub as hub_command
from edgehub import hubsettings
from edgehub import manager as manager_command
from manifests_support import (
    HANDLERS,
    IMAGE_REPOSITORY,
    KUBELET_KUBECONFIG,
    KUSTOMIZATION,
    MANIFESTS,
    REPO,
    SAMPLES,
    STATIC_POD,
    Manifest,
    all_manifests,
    load,
    one,
    pod_spec,
    project_version,
    workloads,
)

from discovery import handlers, sdk
from discovery.agent import settings as agent_settings
from managers import csrapproving
from yurthub import settings as hub_settings
from yurthub.cache import agents
from yurthub.certs import modes
from yurthub.filters import runtime as filtering
from yurthub.testing.fixtures import KUBECTL

EDGEHUB = shutil.which("edgehub", path=str(Path(sys.executable).parent)) or "edgehub"
NODE = "edge-node-1"
NAMESPACE = "edgehub-system"
COMMANDS: dict[str, click.Command] = {
    "hub": hub_command.command,
    "agent": agent_command.command,
    "handler": handler_command.command,
    "manager": manager_command.command,
}


# --------------------------------------------------------------------------- helpers


def container(doc: Mapping[str, Any]) -> dict[str, Any]:
    (only,) = pod_spec(doc)["containers"]
    return dict(only)


# What kubelet puts into the fieldRefs the manifests use (the Pods all live in NAMESPACE).
FIELD_VALUES = {"spec.nodeName": NODE, "metadata.namespace": NAMESPACE}


def environment(c: Mapping[str, Any]) -> dict[str, str]:
    """The container's env as kubelet resolves it here (fieldRefs from FIELD_VALUES)."""
    env: dict[str, str] = {}
    for item in c.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            (field,) = [
                path
                for path in FIELD_VALUES
                if item["valueFrom"] == {"fieldRef": {"fieldPath": path}}
            ]
            env[item["name"]] = FIELD_VALUES[field]
    return env


def command_line(c: Mapping[str, Any]) -> list[str]:
    """command + args with kubelet's ``$(VAR)`` expansion from the container's env."""
    env = environment(c)
    words = [*c.get("command", []), *c.get("args", [])]
    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], w) for w in words]


def flags(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("--")]


def parse(c: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]]:
    """Parse the container's command line with the real click command and its env."""
    words = command_line(c)
    assert words[0] == "edgehub", words
    for name in list(os.environ):
        if name.startswith("EDGEHUB_"):
            monkeypatch.delenv(name)
    for name, value in environment(c).items():
        monkeypatch.setenv(name, value)
    command = COMMANDS[words[1]]
    with command.make_context(words[1], words[2:]) as ctx:
        return words[1], dict(ctx.params)


def mounts(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """mountPath -> the hostPath (or emptyDir) volume behind it, with readOnly."""
    volumes = {v["name"]: v for v in pod_spec(doc).get("volumes") or []}
    found: dict[str, dict[str, Any]] = {}
    for m in container(doc).get("volumeMounts") or []:
        volume = volumes[m["name"]]
        found[m["mountPath"]] = {**volume, "readOnly": bool(m.get("readOnly"))}
    return found


def host_path(doc: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The mount holding ``path`` (the deepest mountPath above it)."""
    holders = [p for p in mounts(doc) if path == Path(p) or Path(p) in path.parents]
    assert holders, f"{path} is not on any volume"
    return mounts(doc)[max(holders, key=len)]


def daemonsets() -> Iterator[Manifest]:
    return (m for m in all_manifests() if m.kind == "DaemonSet")


def agent_daemonset() -> dict[str, Any]:
    return one(MANIFESTS / "discovery" / "agent.yaml", "DaemonSet")


def handler_daemonsets() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(HANDLERS.glob("*.yaml")):
        doc = one(path, "DaemonSet")
        words = command_line(container(doc))
        assert words[:2] == ["edgehub", "handler"], words
        found[words[2]] = doc
    return found


def probe(c: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return dict(c[kind]["httpGet"]) | {k: v for k, v in c[kind].items() if k != "httpGet"}


def port_number(c: Mapping[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in c.get("ports") or [] if p["name"] == port]
    return int(number)


# --------------------------------------------------------------------------- the hub


def test_static_pod_keeps_the_design_contract() -> None:
    pod = one(STATIC_POD, "Pod")
    spec, hub = pod["spec"], container(pod)
    assert pod["apiVersion"] == "v1" and pod["metadata"]["namespace"] == "kube-system"
    assert spec["hostNetwork"] is True
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["dnsPolicy"] == "Default"  # never depend on cluster DNS
    assert probe(hub, "livenessProbe") == {
        "host": "127.0.0.1",
        "path": "/v1/healthz",
        "port": 10267,
        "initialDelaySeconds": 120,
        "periodSeconds": 10,
        "failureThreshold": 3,
    }
    readiness = probe(hub, "readinessProbe")
    assert (readiness["host"], readiness["path"], readiness["port"]) == (
        "127.0.0.1",
        "/v1/readyz",
        10267,
    )
    assert hub["resources"] == {
        "requests": {"cpu": "150m", "memory": "150Mi"},
        "limits": {"memory": "300Mi"},
    }
    assert {p["containerPort"] for p in hub["ports"]} == {10261, 10267, 10268}
    assert host_path(pod, Path("/etc/kubernetes/cache"))["hostPath"]["path"] == (
        "/etc/kubernetes/cache"
    )
    assert host_path(pod, Path("/var/lib/yurthub"))["hostPath"]["path"] == "/var/lib/yurthub"
    # The dummy interface needs NET_ADMIN; nothing else is added.
    assert hub["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert hub["image"] == f"{IMAGE_REPOSITORY}:{project_version()}"


def test_static_pod_command_builds_the_settings_it_promises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pod = one(STATIC_POD, "Pod")
    hub = container(pod)
    assert command_line(hub)[:2] == ["edgehub", "hub"]
    assert "--node-name=$(NODE_NAME)" in hub["command"]
    _, params = parse(hub, monkeypatch)
    built = hubsettings.build_settings(params)
    assert built.node_name == NODE
    assert built.upstream.servers == ("https://apiserver_host:6443",)  # the placeholder
    liveness = probe(hub, "livenessProbe")
    assert (built.listen.bind_address, built.listen.serve_port) == (
        liveness["host"],
        liveness["port"],
    )
    assert (built.listen.bind_proxy_address, built.listen.proxy_port) == ("127.0.0.1", 10261)
    assert built.cache.disk_cache_path == Path("/etc/kubernetes/cache")
    # Its own identity, YurtHub's way: a join token pinned to the cluster CA, files kept
    # under --root-dir (certificates requested, renewed and written there).
    assert built.upstream.kubeconfig is None
    assert built.certs.source is modes.Source.JOIN_TOKEN
    assert built.certs.ca_cert_hashes and not built.certs.unsafe_skip_ca_verification
    assert built.listen.enable_dummy_if and built.listen.proxy_secure_port == 10268
    # So pods reach it at the dummy IP: the filters pointing them there are on.
    assert filtering.Filters(built).inactive == {}
    assert built.hub_address == ("169.254.2.1", 10268)
    # Its identity and its cache are on host volumes: they survive a restart of the Pod.
    for path in (built.certs.root_dir, built.cache.disk_cache_path):
        assert "hostPath" in host_path(pod, path)
        assert not host_path(pod, path)["readOnly"]
    assert built.authn.issuer_keys_file is not None
    assert "hostPath" in host_path(pod, built.authn.issuer_keys_file)
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > built.proxy.shutdown_grace


def test_kubelet_kubeconfig_points_at_the_hub_proxy() -> None:
    # The real kubectl reads it as a kubeconfig.
    viewed = subprocess.run(
        [
            KUBECTL,
            "config",
            "view",
            "--kubeconfig",
            str(KUBELET_KUBECONFIG),
            "-o",
            "yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    config = yaml.safe_load(viewed.stdout)
    (context,) = [c for c in config["contexts"] if c["name"] == config["current-context"]]
    (cluster,) = [c for c in config["clusters"] if c["name"] == context["context"]["cluster"]]
    assert cluster["cluster"]["server"] == "http://127.0.0.1:10261"
    (user,) = [u for u in config["users"] if u["name"] == context["context"]["user"]]
    assert not user.get("user"), "kubelet needs no credentials towards the hub"
    assert KUBELET_KUBECONFIG.suffix not in (".yaml", ".yml", ".json")  # kubectl -R skips it


def test_yurt_hub_cfg_is_found_by_the_hub_and_caches_the_agent() -> None:
    cm = one(MANIFESTS / "hub" / "yurt-hub-cfg.yaml", "ConfigMap")
    assert cm["metadata"]["name"] == agents.CONFIGMAP_NAME
    assert cm["metadata"]["namespace"] == hub_settings.CacheSettings().config_namespace
    assert cm["metadata"]["labels"][agents.CONFIGMAP_LABEL] == agents.CONFIGMAP_NAME
    component = agent_settings.KubeSettings().user_agent.split("/")[0]
    assert component in agents.parse_agents(cm["data"][agents.CONFIGMAP_KEY])


def test_hub_rbac_grants_what_kube_proxy_and_the_config_follower_need() -> None:
    docs = load(MANIFESTS / "hub" / "rbac.yaml")
    roles = {m.namespace: m.doc for m in docs if m.kind == "Role"}
    cluster_roles = [m.doc for m in docs if m.kind == "ClusterRole"]
    bindings = [m.doc for m in docs if m.kind in ("RoleBinding", "ClusterRoleBinding")]
    # The node's own Lease is the Node authorizer's business: no grant beside it.
    assert "kube-node-lease" not in roles
    config_namespace = hub_settings.CacheSettings().config_namespace
    assert _allows(roles[config_namespace]["rules"], "", "configmaps", ("get", "list", "watch"))
    # kube-proxy reads these through the hub with the node's identity (the real-cluster suite
    # shows the Node authorizer refusing them otherwise).
    (proxied,) = cluster_roles
    for group, resource in (
        ("discovery.k8s.io", "endpointslices"),
        ("networking.k8s.io", "servicecidrs"),
    ):
        assert _allows(proxied["rules"], group, resource, ("get", "list", "watch"))
    assert {v for r in proxied["rules"] for v in r["verbs"]} == {"get", "list", "watch"}
    # Ours, or the built-in issuer-discovery role (the hub verifies pods' tokens offline).
    names = {r["metadata"]["name"] for r in [*roles.values(), *cluster_roles]}
    names.add("system:service-account-issuer-discovery")
    for binding in bindings:
        assert binding["roleRef"]["name"] in names
        assert binding["subjects"] == [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}
        ]


def test_hub_rbac_grants_the_filters_their_inputs() -> None:
    docs = load(MANIFESTS / "hub" / "rbac.yaml")
    roles = {m.doc["metadata"]["name"]: m.doc for m in docs if m.kind == "ClusterRole"}
    bindings = [m.doc for m in docs if m.kind == "ClusterRoleBinding"]
    for resource in ("nodepools", "nodebuckets"):
        assert any(
            _allows(
                roles.get(b["roleRef"]["name"], {"rules": []})["rules"],
                "apps.openyurt.io",
                resource,
                ("get", "list", "watch"),
            )
            and {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}
            in b["subjects"]
            for b in bindings
        ), resource
    # What the filters follow is what the manifests grant (services and nodes: Node authorizer).
    s = hub_settings.HubSettings(
        node_name=NODE, upstream=hub_settings.UpstreamSettings(servers=("https://127.0.0.1:1",))
    )
    paths = {path for _, _, path, _, _ in filtering.Filters(s).needed()}
    assert paths == {filtering.NODEPOOLS_PATH, "/api/v1/services", "/api/v1/nodes"}


def test_hub_rbac_for_bootstrap_and_issuer_keys() -> None:
    bootstrap = load(MANIFESTS / "hub" / "bootstrap-rbac.yaml")
    (csrs,) = [m.doc for m in bootstrap if m.kind == "ClusterRoleBinding"]
    assert csrs["roleRef"]["name"] == "system:node-bootstrapper"
    assert csrs["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:bootstrappers"}
    ]
    (role,) = [m.doc for m in bootstrap if m.kind == "Role"]
    assert role["metadata"]["namespace"] == "kube-public"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["cluster-info"],
            "verbs": ["get"],
        }
    ]
    (issuer,) = [
        m.doc
        for m in load(MANIFESTS / "hub" / "rbac.yaml")
        if m.kind == "ClusterRoleBinding"
        and m.doc["roleRef"]["name"] == "system:service-account-issuer-discovery"
    ]
    assert {s["name"] for s in issuer["subjects"]} == {"system:nodes"}


def _allows(
    rules: list[Mapping[str, Any]], group: str, resource: str, verbs: tuple[str, ...]
) -> bool:
    return all(
        any(
            group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
            for r in rules
        )
        for verb in verbs
    )


# --------------------------------------------------------------------------- flags and commands


def test_every_flag_exists_in_the_installed_binary() -> None:
    needed: dict[tuple[str, ...], set[str]] = {}
    for m in workloads():
        words = command_line(container(m.doc))
        sub = tuple(words[1:3]) if words[1] == "handler" else (words[1],)
        needed.setdefault(sub, set()).update(flags(words))
    assert set(needed) >= {("hub",), ("agent",), ("manager",)}
    missing: list[str] = []
    for sub, wanted in sorted(needed.items()):
        shown = subprocess.run(
            [EDGEHUB, *sub, "--help-all"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        missing += [
            f"edgehub {' '.join(sub)} {flag}"
            for flag in sorted(wanted)
            if flag not in re.findall(r"--[a-z0-9-]+", shown)
        ]
    assert missing == []


@pytest.mark.parametrize("manifest", list(workloads()), ids=lambda m: m.name)
def test_every_command_line_parses_with_its_environment(
    manifest: Manifest, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = container(manifest.doc)
    sub, params = parse(c, monkeypatch)
    if sub == "handler":
        # The handler builds from exactly this environment (e.g. DEBUG_ECHO_INSTANCES_SHARED).
        built = sdk.load(params["name"], sdk.HandlerOptions(environ=environment(c)))
        assert built.name == params["name"]
        assert not host_path(manifest.doc, params["discovery_handlers_directory"])["readOnly"]
    if sub == "agent":
        assert params["node_name"] == NODE  # AGENT_NODE_NAME from spec.nodeName
        for path in (
            params["discovery_handlers_directory"],
            params["device_plugins_dir"],
            params["cdi_dir"],
        ):
            assert not host_path(manifest.doc, path)["readOnly"], path
        assert "hostPath" in host_path(manifest.doc, params["pod_resources_socket"])


# --------------------------------------------------------------------------- discovery


def test_agent_daemonset_reaches_the_hub_and_probes_its_own_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ds = agent_daemonset()
    spec, c = pod_spec(ds), container(ds)
    _, params = parse(c, monkeypatch)
    # The hub's proxy listens on the node's loopback: only the host network reaches it.
    hub_proxy = yaml.safe_load(KUBELET_KUBECONFIG.read_text())["clusters"][0]["cluster"]["server"]
    assert params["server_addr"] == hub_proxy and spec["hostNetwork"] is True
    for kind, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        got = probe(c, kind)
        assert got["path"] == path
        assert port_number(c, got["port"]) == params["metrics_port"]
    env = environment(c)
    assert env["DISCOVERY_HANDLERS_DIRECTORY"] == "/var/lib/akri"
    assert {"AGENT_NODE_NAME", "DISCOVERY_HANDLERS_DIRECTORY"} <= set(env)
    mounted = mounts(ds)
    for path in (
        "/var/lib/kubelet/device-plugins",
        "/var/lib/kubelet/pod-resources",
        "/var/run/cdi",
        "/var/lib/akri",
    ):
        assert mounted[path]["hostPath"]["path"] == path
    for path in ("/run/udev", "/sys"):
        assert mounted[path]["hostPath"]["path"] == path and mounted[path]["readOnly"]


def test_agent_rbac_binds_the_daemonset_service_account() -> None:
    ds = agent_daemonset()
    docs = {m.kind: m.doc for m in load(MANIFESTS / "discovery" / "agent-rbac.yaml")}
    account = docs["ServiceAccount"]["metadata"]
    assert pod_spec(ds)["serviceAccountName"] == account["name"]
    assert ds["metadata"]["namespace"] == account["namespace"]
    (subject,) = docs["ClusterRoleBinding"]["subjects"]
    assert (subject["kind"], subject["name"], subject["namespace"]) == (
        "ServiceAccount",
        account["name"],
        account["namespace"],
    )
    assert docs["ClusterRoleBinding"]["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]
    rules = docs["ClusterRole"]["rules"]
    assert _allows(rules, "akri.sh", "configurations", ("get", "list", "watch", "update", "patch"))
    assert _allows(
        rules,
        "akri.sh",
        "instances",
        ("get", "list", "watch", "create", "update", "patch", "delete"),
    )
    assert _allows(rules, "", "configmaps", ("get",)) and _allows(rules, "", "secrets", ("get",))
    assert not _allows(rules, "", "secrets", ("list",))
    assert _allows(rules, "", "events", ("create", "patch"))


def test_one_handler_daemonset_per_builtin_handler() -> None:
    found = handler_daemonsets()
    assert set(found) == set(handlers.BUILTIN)
    for name, ds in found.items():
        spec, c = pod_spec(ds), container(ds)
        assert environment(c)["DISCOVERY_HANDLERS_DIRECTORY"] == "/var/lib/akri", name
        assert mounts(ds)["/var/lib/akri"]["hostPath"]["path"] == "/var/lib/akri", name
        assert spec.get("automountServiceAccountToken") is False, name
        # Only ONVIF's multicast probe needs the node's network.
        assert bool(spec.get("hostNetwork")) == (name == "onvif"), name
    udev = mounts(found["udev"])
    assert udev["/run/udev"]["readOnly"] and udev["/sys"]["readOnly"]


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_sample_configuration_parses_with_its_real_handler(path: Path) -> None:
    (sample,) = load(path)
    handler = sample.doc["spec"]["discoveryHandler"]
    assert handler["name"] in handler_daemonsets(), "no handler DaemonSet serves this sample"
    built = sdk.load(handler["name"], sdk.HandlerOptions(environ={}))
    built.parse_details(handler["discoveryDetails"])  # raises DetailsError naming the field
    assert "namespace" not in sample.doc["metadata"]  # operators pick one with -n


def test_every_builtin_handler_has_a_sample() -> None:
    names = {load(p)[0].doc["spec"]["discoveryHandler"]["name"] for p in SAMPLES.glob("*.yaml")}
    assert names == set(handlers.BUILTIN)


# --------------------------------------------------------------------------- the manager


def manager_deployment() -> dict[str, Any]:
    return one(MANIFESTS / "manager" / "deployment.yaml", "Deployment")


def manager_rbac() -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for m in load(MANIFESTS / "manager" / "rbac.yaml"):
        found.setdefault(m.kind, []).append(m.doc)
    return found


def test_manager_runs_replicated_with_leader_election_on_its_own_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployment = manager_deployment()
    spec, c = pod_spec(deployment), container(deployment)
    assert deployment["spec"]["replicas"] >= 2
    _, params = parse(c, monkeypatch)
    assert params["leader_elect"] is True
    assert params["controllers"] == "*"
    # The Lease lives where the Deployment is, and its Role is there too.
    namespace = deployment["metadata"]["namespace"]
    assert params["leader_elect_namespace"] == namespace
    (role,) = manager_rbac()["Role"]
    assert role["metadata"]["namespace"] == namespace
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert [params["leader_elect_lease_name"]] == named[0]["resourceNames"]
    for kind, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        got = probe(c, kind)
        assert got["path"] == path
        assert port_number(c, got["port"]) == params["health_port"]
    assert params["bind_address"] == "0.0.0.0"  # the kubelet probes the Pod IP
    # In the cloud only: an edge node may lose its link and with it the leader's Lease.
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {"key": "openyurt.io/is-edge-worker", "operator": "NotIn", "values": ["true"]} in term[
        "matchExpressions"
    ]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    grace = spec["terminationGracePeriodSeconds"]
    assert grace > params["leader_elect_renew_deadline"]  # time to stop and release the Lease


def test_manager_rbac_binds_its_service_account_to_exactly_its_grants() -> None:
    deployment = manager_deployment()
    docs = manager_rbac()
    (account,) = docs["ServiceAccount"]
    assert pod_spec(deployment)["serviceAccountName"] == account["metadata"]["name"]
    assert deployment["metadata"]["namespace"] == account["metadata"]["namespace"]
    subject = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": account["metadata"]["namespace"],
    }
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        (bound,) = docs[binding]
        (granted,) = docs[role]
        assert bound["subjects"] == [subject]
        assert bound["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role,
            "name": granted["metadata"]["name"],
        }
    (cluster_role,) = docs["ClusterRole"]
    grants = {
        (group, resource, verb, tuple(rule.get("resourceNames") or ()))
        for rule in cluster_role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    signers = (csrapproving.CLIENT_SIGNER, csrapproving.SERVING_SIGNER)
    assert grants == {
        ("certificates.k8s.io", "certificatesigningrequests", "get", ()),
        ("certificates.k8s.io", "certificatesigningrequests", "list", ()),
        ("certificates.k8s.io", "certificatesigningrequests", "watch", ()),
        ("certificates.k8s.io", "certificatesigningrequests/approval", "update", ()),
        ("certificates.k8s.io", "signers", "approve", signers),
        ("", "events", "create", ()),
        *(
            (group, resource, verb, ())
            for group, resource, verbs in (
                ("akri.sh", "configurations", ("get", "list", "watch", "update")),
                ("akri.sh", "instances", ("get", "list", "watch", "update", "delete")),
                ("akri.sh", "instances/finalizers", ("update",)),
                ("akri.sh", "configurations/finalizers", ("update",)),
                ("", "pods", ("get", "list", "watch", "create", "delete")),
                ("", "services", ("get", "list", "watch", "create", "update", "delete")),
                ("batch", "jobs", ("get", "list", "watch", "create", "delete")),
                ("", "nodes", ("get", "list", "watch")),
            )
            for verb in verbs
        ),
    }


def test_manager_webhook_is_served_where_its_configuration_points() -> None:
    deployment = manager_deployment()
    c = container(deployment)
    (service,) = [m.doc for m in load(MANIFESTS / "manager" / "webhook-service.yaml")]
    (webhook_config,) = [m.doc for m in load(MANIFESTS / "manager" / "webhook.yaml")]
    (hook,) = webhook_config["webhooks"]
    reference = hook["clientConfig"]["service"]
    assert reference["name"] == service["metadata"]["name"]
    assert reference["namespace"] == service["metadata"]["namespace"]
    assert reference["namespace"] == deployment["metadata"]["namespace"]
    assert reference["path"] == "/validate"
    (port,) = service["spec"]["ports"]
    assert reference["port"] == port["port"]
    args = c["args"]
    assert f"--webhook-port={port_number(c, port['targetPort'])}" in args
    # The Service reaches every replica: the Deployment's pods carry its selector.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    # The certificate comes from an optional Secret volume mounted where the flags look.
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    (volume,) = [v for v in pod_spec(deployment)["volumes"] if v["name"] == "webhook-tls"]
    assert volume["secret"]["optional"] is True
    assert f"--webhook-tls-cert-file={mounts['webhook-tls']}/tls.crt" in args
    assert f"--webhook-tls-key-file={mounts['webhook-tls']}/tls.key" in args
    # Only Configurations, only creates and updates; never a side effect.
    assert hook["rules"] == [
        {
            "apiGroups": ["akri.sh"],
            "apiVersions": ["v0"],
            "resources": ["configurations"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]


# --------------------------------------------------------------------------- the image


def test_every_image_is_the_release_image() -> None:
    wanted = f"{IMAGE_REPOSITORY}:{project_version()}"
    images = {container(m.doc)["image"] for m in workloads()}
    assert images == {wanted}
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    assert kustomization["images"] == [{"name": IMAGE_REPOSITORY, "newTag": project_version()}]


def test_dockerfile_copies_every_package_it_installs() -> None:
    text = (REPO / "Dockerfile").read_text()
    copied: set[str] = set()
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            copied.update(w.rstrip("/") for w in words[1:-1])
    for source in copied:
        assert (REPO / source).exists(), source
    # What the wheel installs, as pyproject's package list names it (``cmd/edgehub``).
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]
    wheel = tool["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert "yurthub" in wheel and "cmd/edgehub" in wheel
    for package in sorted({p.split("/")[0] for p in wheel}):
        assert package in copied, package
