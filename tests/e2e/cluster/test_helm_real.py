"""The Helm chart on the real control plane, with the pinned Helm (``make cluster-bins``).

* ``helm install`` (its own release and namespace, so the plain manifests other tests apply
  stay untouched): every object is created, the real RBAC authorizer grants each part what it
  needs (the manager approves hub CSRs, the agent writes Instances, the hubs read
  EndpointSlices as nodes), the autonomy admission policy is there, the generated static Pod
  is one the apiserver accepts; ``helm uninstall`` removes it all.
* ``helm install`` with a join token, then ``helm upgrade`` with another image tag and token:
  the objects in the cluster change, the token is a bootstrap token Secret the real apiserver
  authenticates (and in no ConfigMap), the old token's Secret is gone; ``helm uninstall``
  removes the last one.
* ``helm template`` output applied with kubectl (another release and namespace), then deleted.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import yaml

from yurthub.testing import realcluster

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[3]
CHART = REPO / "manifests" / "helm" / "edgehub"


def _helm_binary() -> str:
    path = subprocess.run(
        [sys.executable, str(REPO / "tests" / "cluster" / "build.py"), "--print-helm"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not pathlib.Path(path).is_file():
        pytest.fail(f"no helm at {path}: run `make cluster-bins`", pytrace=False)
    return path


def helm(cluster: realcluster.RealCluster, *args: str) -> str:
    done = subprocess.run(
        [_helm_binary(), "--kubeconfig", str(cluster.admin_kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def can(cluster: realcluster.RealCluster, *args: str) -> bool:
    done = cluster.kubectl("auth", "can-i", *args, check=False)
    return done.stdout.strip() == "yes"


def test_helm_install_grants_each_part_what_it_needs_and_uninstalls(
    real_cluster: realcluster.RealCluster,
) -> None:
    ns, release = "edgehub-helm", "eh-helm"
    helm(
        real_cluster, "install", release, str(CHART), "-n", ns, "--create-namespace",
        "--set", f"hub.namespace={ns}", "--set", "debugEcho.discovery.enabled=true",
        "--set", "debugEcho.configuration.enabled=true",
    )  # fmt: skip
    try:
        status = helm(real_cluster, "status", release, "-n", ns)
        assert "STATUS: deployed" in status
        got = real_cluster.kubectl(
            "get", "-n", ns, "daemonset,deployment,service,configmap,serviceaccount", "-o", "name"
        ).stdout.split()
        for name in (
            f"daemonset.apps/{release}-agent",
            f"daemonset.apps/{release}-udev",
            f"daemonset.apps/{release}-debug-echo",
            f"deployment.apps/{release}-manager",
            f"service/{release}-manager-webhook",
            "configmap/yurt-hub-cfg",
            f"configmap/{release}-hub-static-pod",
            f"serviceaccount/{release}-agent",
            f"serviceaccount/{release}-manager",
        ):
            assert name in got, (name, got)
        assert real_cluster.kubectl("get", "configuration.akri.sh", "-n", ns, "akri-debug-echo")
        real_cluster.kubectl(
            "get", "validatingadmissionpolicy", f"{release}-manager-autonomy", "-o", "name"
        )
        manager = f"system:serviceaccount:{ns}:{release}-manager"
        agent = f"system:serviceaccount:{ns}:{release}-agent"
        assert can(
            real_cluster, "update", "certificatesigningrequests.certificates.k8s.io",
            "--subresource=approval", f"--as={manager}",
        )  # fmt: skip
        assert can(real_cluster, "create", "pods", "-n", "default", f"--as={manager}")
        assert can(
            real_cluster, "update", f"leases.coordination.k8s.io/{release}-manager", "-n", ns,
            f"--as={manager}",
        )  # fmt: skip
        assert not can(real_cluster, "update", "leases.coordination.k8s.io/other", "-n", ns,
                       f"--as={manager}")  # fmt: skip
        # The hub-leader controllers: pools' status, leader-hub ConfigMaps in the hubs'
        # namespace, escalate on yurt-hub-multiplexer only.
        assert can(real_cluster, "update", "nodepools.apps.openyurt.io", "--subresource=status",
                   f"--as={manager}")  # fmt: skip
        assert can(real_cluster, "create", "configmaps", "-n", ns, f"--as={manager}")
        assert can(real_cluster, "escalate", "clusterroles/yurt-hub-multiplexer",
                   f"--as={manager}")  # fmt: skip
        assert not can(real_cluster, "escalate", "clusterroles/admin", f"--as={manager}")
        assert can(real_cluster, "create", "instances.akri.sh", "-n", "default", f"--as={agent}")
        assert not can(real_cluster, "create", "pods", "-n", "default", f"--as={agent}")
        node = ["--as=system:node:edge-x", "--as-group=system:nodes"]
        assert can(real_cluster, "list", "endpointslices.discovery.k8s.io", "-A", *node)
        assert can(real_cluster, "get", "configmaps", "-n", ns, *node)
        # The static Pod the chart generates is a Pod the apiserver accepts as it is.
        static = real_cluster.kubectl(
            "get", "configmap", "-n", ns, f"{release}-hub-static-pod",
            "-o", "jsonpath={.data.edgehub-hub\\.yaml}",
        ).stdout  # fmt: skip
        pod = yaml.safe_load(static)
        assert pod["spec"]["containers"][0]["command"][:2] == ["edgehub", "hub"]
        real_cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=static)
    finally:
        helm(real_cluster, "uninstall", release, "-n", ns, "--wait")
    left = real_cluster.kubectl(
        "get", "-n", ns, "daemonset,deployment,configmap", "-l",
        f"app.kubernetes.io/instance={release}", "-o", "name",
    ).stdout.split()  # fmt: skip
    assert left == []
    assert (
        real_cluster.kubectl("get", "clusterrole", f"{release}:manager", check=False).returncode
        != 0
    )
    real_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_helm_template_output_applies_with_kubectl(real_cluster: realcluster.RealCluster) -> None:
    ns, release = "edgehub-tpl", "eh-tpl"
    rendered = helm(
        real_cluster, "template", release, str(CHART), "-n", ns, "--include-crds",
        "--set", f"hub.namespace={ns}",
    )  # fmt: skip
    real_cluster.kubectl("create", "namespace", ns)
    try:
        applied = real_cluster.kubectl("apply", "--server-side", "-f", "-", input=rendered).stdout
        assert f"deployment.apps/{release}-manager serverside-applied" in applied, applied
        assert f"daemonset.apps/{release}-agent serverside-applied" in applied
        ready = real_cluster.kubectl(
            "get", "deployment", "-n", ns, f"{release}-manager", "-o", "jsonpath={.spec.replicas}"
        ).stdout
        assert ready == "2"
    finally:
        without_crds = "\n---\n".join(
            yaml.safe_dump(d)
            for d in yaml.safe_load_all(rendered)
            if d and d["kind"] != "CustomResourceDefinition"
        )
        real_cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=without_crds
        )
        real_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _images(cluster: realcluster.RealCluster, ns: str, release: str) -> dict[str, str]:
    got = {}
    for kind, name in (("daemonset", f"{release}-agent"), ("deployment", f"{release}-manager")):
        got[kind] = cluster.kubectl(
            "get", kind, "-n", ns, name, "-o", "jsonpath={.spec.template.spec.containers[0].image}"
        ).stdout  # fmt: skip
    static = cluster.kubectl(
        "get", "configmap", "-n", ns, f"{release}-hub-static-pod",
        "-o", "jsonpath={.data.edgehub-hub\\.yaml}",
    ).stdout  # fmt: skip
    got["static-pod"] = yaml.safe_load(static)["spec"]["containers"][0]["image"]
    return got


def _whoami(cluster: realcluster.RealCluster, token: str, tmp: pathlib.Path) -> str:
    """Who the real apiserver says the bearer of ``token`` is (a kubeconfig with nothing else)."""
    kubeconfig = tmp / "token.conf"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": cluster.url,
                                              "certificate-authority": str(cluster.ca_path)}}
                ],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )  # fmt: skip
    done = cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig)
    return str(json.loads(done.stdout)["status"]["userInfo"]["username"])


def test_helm_upgrade_changes_the_objects_and_the_token_stays_in_a_secret(
    real_cluster: realcluster.RealCluster, tmp_path: pathlib.Path
) -> None:
    ns, release = "edgehub-upgrade", "eh-upg"
    first, second = "ehupg1.0123456789abcdef", "ehupg2.fedcba9876543210"
    common = ["-n", ns, "--set", f"hub.namespace={ns}"]
    helm(
        real_cluster, "install", release, str(CHART), *common, "--create-namespace",
        "--set", f"hub.staticPod.joinToken={first}",
    )  # fmt: skip
    try:
        assert set(_images(real_cluster, ns, release).values()) == {"ghcr.io/edgehub/edgehub:0.1.0"}
        secret = json.loads(
            real_cluster.kubectl(
                "get", "secret", "-n", "kube-system", "bootstrap-token-ehupg1", "-o", "json"
            ).stdout
        )  # fmt: skip
        assert secret["type"] == "bootstrap.kubernetes.io/token"
        # The apiserver takes it as a bootstrap token: the chart's value is a working token.
        assert _whoami(real_cluster, first, tmp_path) == "system:bootstrap:ehupg1"
        configmaps = real_cluster.kubectl("get", "configmap", "-n", ns, "-o", "yaml").stdout
        assert "0123456789abcdef" not in configmaps

        helm(
            real_cluster, "upgrade", release, str(CHART), *common,
            "--set", f"hub.staticPod.joinToken={second}", "--set", "image.tag=0.1.1-upgraded",
        )  # fmt: skip
        assert "REVISION: 2" in helm(real_cluster, "status", release, "-n", ns)
        assert set(_images(real_cluster, ns, release).values()) == {
            "ghcr.io/edgehub/edgehub:0.1.1-upgraded"
        }
        assert _whoami(real_cluster, second, tmp_path) == "system:bootstrap:ehupg2"
        gone = real_cluster.kubectl(
            "get", "secret", "-n", "kube-system", "bootstrap-token-ehupg1", check=False
        )  # fmt: skip
        assert gone.returncode != 0 and "NotFound" in gone.stderr
    finally:
        helm(real_cluster, "uninstall", release, "-n", ns, "--wait")
    gone = real_cluster.kubectl(
        "get", "secret", "-n", "kube-system", "bootstrap-token-ehupg2", check=False
    )  # fmt: skip
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    left = real_cluster.kubectl(
        "get", "-n", ns, "daemonset,deployment,configmap", "-l",
        f"app.kubernetes.io/instance={release}", "-o", "name",
    ).stdout.split()  # fmt: skip
    assert left == []
    real_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
