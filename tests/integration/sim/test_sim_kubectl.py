"""The real kubectl against the simulated apiserver: it must not notice the difference.

One simulated apiserver (on a background thread) per module keeps this quick;
every test uses its own object names.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import time
from collections.abc import Iterator

import pytest
import yaml

from yurthub.testing import fixtures, simapiserver


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[simapiserver.SimApiserverThread]:
    with simapiserver.SimApiserverThread(
        workdir=tmp_path_factory.mktemp("sim"), bookmark_interval=0.2
    ) as running:
        yield running


@pytest.fixture(scope="module")
def kubectl(
    sim: simapiserver.SimApiserverThread, tmp_path_factory: pytest.TempPathFactory
) -> fixtures.Kubectl:
    return fixtures.kubectl_runner(sim.sim.kubeconfig_path, tmp_path_factory.mktemp("cache"))


def _popen(
    sim: simapiserver.SimApiserverThread, tmp: pathlib.Path, *args: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            fixtures.KUBECTL,
            "--kubeconfig",
            str(sim.sim.kubeconfig_path),
            "--cache-dir",
            str(tmp),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_until(proc: subprocess.Popen[str], needle: str, timeout: float = 10) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not seen in {seen!r}")


def test_get_table_json_yaml_and_raw(kubectl: fixtures.Kubectl) -> None:
    nodes = kubectl("get", "nodes").stdout.splitlines()
    assert nodes[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert sorted(line.split()[0] for line in nodes[1:]) == [
        "cloud-node-1",
        "edge-node-1",
        "edge-node-2",
    ]
    assert all(line.split()[1] == "Ready" for line in nodes[1:])
    wide = kubectl(
        "get", "pods", "-n", "kube-system", "-o", "wide", "-l", "k8s-app=kube-proxy"
    ).stdout
    assert wide.count("kube-proxy-") == 3 and "127.0.1.1" in wide
    pods = json.loads(
        kubectl(
            "get", "pods", "-A", "-o", "json", "--field-selector", "spec.nodeName=edge-node-1"
        ).stdout
    )
    assert pods["items"] and {p["spec"]["nodeName"] for p in pods["items"]} == {"edge-node-1"}
    svc = yaml.safe_load(kubectl("get", "svc", "kubernetes", "-o", "yaml").stdout)
    assert svc["spec"]["clusterIP"] == "10.96.0.1" and svc["spec"]["ports"][0]["port"] == 443
    version = json.loads(kubectl("get", "--raw", "/version").stdout)
    assert version["gitVersion"].startswith("v1.32")
    assert kubectl("get", "--raw", "/readyz?verbose").stdout.strip().endswith("readyz check passed")
    cm = yaml.safe_load(
        kubectl("get", "cm", "kube-proxy", "-n", "kube-system", "-o", "yaml").stdout
    )
    assert "kubeconfig: /var/lib/kube-proxy/kubeconfig.conf" in cm["data"]["config.conf"]


def test_api_resources_lists_builtins(kubectl: fixtures.Kubectl) -> None:
    out = kubectl("api-resources", "-o", "name").stdout.split()
    for name in (
        "pods",
        "leases.coordination.k8s.io",
        "endpointslices.discovery.k8s.io",
        "certificatesigningrequests.certificates.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
    ):
        assert name in out


def test_create_apply_patch_label_annotate_delete(
    kubectl: fixtures.Kubectl, tmp_path: pathlib.Path
) -> None:
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "flow"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "flow"}},
            "template": {
                "metadata": {"labels": {"app": "flow"}},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "nginx:1.25"},
                        {"name": "side", "image": "busybox"},
                    ]
                },
            },
        },
    }
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert "created" in kubectl("apply", "-f", str(path)).stdout
    manifest["spec"]["replicas"] = 3  # type: ignore[index]
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.27"  # type: ignore[index]
    path.write_text(yaml.safe_dump(manifest))
    assert "configured" in kubectl("apply", "-f", str(path)).stdout
    side = {
        "spec": {"template": {"spec": {"containers": [{"name": "side", "image": "busybox:2"}]}}}
    }
    kubectl("patch", "deploy", "flow", "--type=strategic", "-p", json.dumps(side))
    kubectl(
        "patch",
        "deploy",
        "flow",
        "--type=merge",
        "-p",
        '{"metadata":{"labels":{"patched":"merge"}}}',
    )
    kubectl(
        "patch",
        "deploy",
        "flow",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/replicas","value":2}]',
    )
    kubectl("label", "deploy", "flow", "tier=backend")
    kubectl("annotate", "deploy", "flow", "note=hello")
    got = json.loads(kubectl("get", "deploy", "flow", "-o", "json").stdout)
    images = [c["image"] for c in got["spec"]["template"]["spec"]["containers"]]
    assert images == ["nginx:1.27", "busybox:2"]
    assert got["spec"]["replicas"] == 2
    assert got["metadata"]["labels"] == {"patched": "merge", "tier": "backend"}
    assert got["metadata"]["annotations"]["note"] == "hello"
    assert got["metadata"]["generation"] >= 3
    cm = tmp_path / "cm.yaml"
    cm.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "made"},
                "data": {"a": "1"},
            }
        )
    )
    kubectl("create", "-f", str(cm))
    failed = kubectl("create", "-f", str(cm), check=False)
    assert failed.returncode == 1 and "AlreadyExists" in failed.stderr
    kubectl("delete", "-f", str(path), "-f", str(cm))
    gone = kubectl("get", "deploy", "flow", check=False)
    assert gone.returncode == 1 and "NotFound" in gone.stderr


def test_imperative_create_commands_send_protobuf(kubectl: fixtures.Kubectl) -> None:
    kubectl("create", "namespace", "proto-ns")
    kubectl("create", "configmap", "gen-cm", "-n", "proto-ns", "--from-literal=k=v")
    kubectl(
        "create",
        "deployment",
        "gen-deploy",
        "-n",
        "proto-ns",
        "--image=nginx",
        "--replicas=2",
        "--port=80",
    )
    kubectl(
        "create", "secret", "generic", "gen-secret", "-n", "proto-ns", "--from-literal=password=pw"
    )
    deploy = json.loads(
        kubectl("get", "deploy", "gen-deploy", "-n", "proto-ns", "-o", "json").stdout
    )
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 80, "protocol": "TCP"}
    ]
    out = kubectl(
        "get", "secret", "gen-secret", "-n", "proto-ns", "-o", "jsonpath={.data.password}"
    ).stdout
    assert out == "cHc="
    token = kubectl("create", "token", "default", "-n", "proto-ns").stdout.strip()
    assert token.count(".") == 2
    kubectl("delete", "namespace", "proto-ns")
    assert kubectl("get", "cm", "-n", "proto-ns", "-o", "name").stdout == ""


def test_get_watch_sees_an_event(
    sim: simapiserver.SimApiserverThread, tmp_path: pathlib.Path
) -> None:
    proc = _popen(sim, tmp_path, "get", "configmaps", "-w", "--output-watch-events")
    try:
        _read_until(proc, "kube-root-ca.crt")
        sim.call(
            sim.state.create,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "watched", "namespace": "default"},
            },
        )
        line = _read_until(proc, "watched").splitlines()[-1]
        assert line.split()[:2] == ["ADDED", "watched"]
    finally:
        proc.kill()
        proc.communicate()


def test_logs_and_logs_follow(
    sim: simapiserver.SimApiserverThread, kubectl: fixtures.Kubectl, tmp_path: pathlib.Path
) -> None:
    pod = kubectl("get", "pods", "-l", "app=web", "-o", "jsonpath={.items[0].metadata.name}").stdout
    assert "Configuration complete" in kubectl("logs", pod).stdout
    assert len(kubectl("logs", pod, "--tail=1").stdout.splitlines()) == 1
    proc = _popen(sim, tmp_path, "logs", "-f", pod)
    try:
        _read_until(proc, "GET / HTTP/1.1")
        sim.call(sim.sim.append_log, "default", pod, "web", "a brand new line")
        _read_until(proc, "a brand new line")
    finally:
        proc.kill()
        proc.communicate()


def test_exec_over_websocket(
    sim: simapiserver.SimApiserverThread, kubectl: fixtures.Kubectl
) -> None:
    pod = kubectl("get", "pods", "-l", "app=web", "-o", "jsonpath={.items[0].metadata.name}").stdout
    sim.call(sim.sim.clear_audit_log)
    hello = kubectl("exec", pod, "--", "echo", "hello", "edge")
    assert hello.stdout == "hello edge\n"
    execs = [r for r in sim.call(sim.sim.audit_log) if r.subresource == "exec"]
    # A WebSocket upgrade is a GET answered 101; the SPDY fallback would be a POST.
    assert [(r.verb, r.code) for r in execs] == [("get", 101)]
    assert kubectl("exec", pod, "--", "hostname").stdout.strip() == pod
    failed = kubectl("exec", pod, "--", "sh", "-c", "echo oops >&2; exit 3", check=False)
    assert failed.returncode == 3
    assert (
        kubectl("exec", "-i", pod, "--", "cat", input="line one\nline two\n").stdout
        == "line one\nline two\n"
    )
    missing = kubectl("exec", pod, "--", "no-such-tool", check=False)
    assert missing.returncode == 127 and "not found" in missing.stderr


def test_apply_crd_then_custom_resource(kubectl: fixtures.Kubectl, tmp_path: pathlib.Path) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {
                "plural": "gadgets",
                "singular": "gadget",
                "kind": "Gadget",
                "shortNames": ["gd"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Color", "type": "string", "jsonPath": ".spec.color"}
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    cr = {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g1"},
        "spec": {"color": "red"},
    }
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(crd))
    (tmp_path / "cr.yaml").write_text(yaml.safe_dump(cr))
    kubectl("apply", "-f", str(tmp_path / "crd.yaml"))
    kubectl("apply", "-f", str(tmp_path / "cr.yaml"))
    table = kubectl("get", "gd").stdout.splitlines()
    assert table[0].split() == ["NAME", "COLOR"] and table[1].split() == ["g1", "red"]
    cr["spec"] = {"color": "blue"}
    (tmp_path / "cr.yaml").write_text(yaml.safe_dump(cr))
    kubectl("apply", "-f", str(tmp_path / "cr.yaml"))
    assert kubectl("get", "gadget", "g1", "-o", "jsonpath={.spec.color}").stdout == "blue"
    typo = {**cr, "spec": {"colour": "green"}}
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(typo))
    crd_strict = {**crd}
    version = {**crd["spec"]["versions"][0]}  # type: ignore[index]
    version["schema"] = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {"color": {"type": "string"}}}},
        }
    }
    crd_strict["spec"] = {**crd["spec"], "versions": [version]}  # type: ignore[dict-item]
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(crd_strict))
    kubectl("apply", "-f", str(tmp_path / "crd.yaml"))
    refused = kubectl("apply", "-f", str(tmp_path / "typo.yaml"), check=False)
    assert refused.returncode == 1 and 'unknown field "spec.colour"' in refused.stderr
    kubectl("delete", "crd", "gadgets.example.com")
    assert kubectl("get", "gadgets", check=False).returncode != 0


SSA_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ssa-web
  namespace: default
spec:
  selector:
    matchLabels: {app: ssa-web}
  template:
    metadata:
      labels: {app: ssa-web}
    spec:
      containers:
        - name: web
          image: web:1
          ports: [{containerPort: 8080}]
          env: [{name: A, value: "1"}, {name: B, value: "2"}]
"""


def _managers(kubectl: fixtures.Kubectl, *target: str) -> dict[str, object]:
    got = json.loads(kubectl("get", *target, "-o", "json", "--show-managed-fields").stdout)
    return {e["manager"]: e["fieldsV1"] for e in got["metadata"]["managedFields"]}


def test_apply_server_side_owns_fields(kubectl: fixtures.Kubectl) -> None:
    """kubectl apply --server-side: managedFields with k: keys for containers, ports and env,
    a re-apply without an env var removes it, another manager conflicts until it forces."""
    kubectl("apply", "--server-side", "-f", "-", input=SSA_DEPLOYMENT)
    fields = _managers(kubectl, "deployment", "ssa-web")["kubectl"]
    container = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]  # type: ignore[index]
    web = container['k:{"name":"web"}']
    assert web["."] == {} and web["f:image"] == {}
    assert 'k:{"containerPort":8080,"protocol":"TCP"}' in web["f:ports"]
    assert set(web["f:env"]) == {'k:{"name":"A"}', 'k:{"name":"B"}'}
    smaller = SSA_DEPLOYMENT.replace(', {name: B, value: "2"}', "")
    kubectl("apply", "--server-side", "-f", "-", input=smaller)
    got = json.loads(kubectl("get", "deployment", "ssa-web", "-o", "json").stdout)
    env = got["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "A", "value": "1"}], "the env var only kubectl applied is gone"
    other = smaller.replace("web:1", "web:2")
    refused = kubectl(
        "apply", "--server-side", "--field-manager=other", "-f", "-", input=other, check=False
    )
    assert refused.returncode != 0
    assert (
        'conflict with "kubectl": .spec.template.spec.containers[name="web"].image'
        in refused.stderr
    )
    kubectl(
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        "-",
        input=other,
    )
    got = json.loads(kubectl("get", "deployment", "ssa-web", "-o", "json").stdout)
    assert got["spec"]["template"]["spec"]["containers"][0]["image"] == "web:2"
    kubectl("delete", "deployment", "ssa-web")
