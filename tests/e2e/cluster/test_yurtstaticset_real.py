"""The YurtStaticSet CRD on the real control plane: it applies as OpenYurt's does, the status
subresource takes OpenYurt's status, and ``kubectl get yss`` prints OpenYurt's columns
(NAME, AGE, TOTAL, READY, UPGRADED); the manager's yurtstaticset roles grant what the
controller does (the Lease by name only, which list/watch reach through a field selector)."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from yurthub.testing import realcluster

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[3]
CRD = REPO / "manifests" / "crds" / "yurtstaticsets.apps.openyurt.io.yaml"
NS = "yss-e2e"
MANAGER = "system:serviceaccount:edgehub-system:edgehub-manager"


def test_crd_applies_and_kubectl_prints_openyurts_columns(
    real_cluster: realcluster.RealCluster,
) -> None:
    kubectl = real_cluster.kubectl
    kubectl("apply", "--server-side", "-f", str(CRD))
    kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/yurtstaticsets.apps.openyurt.io",
    )
    kubectl("create", "namespace", NS, check=False)
    try:
        body = {
            "apiVersion": "apps.openyurt.io/v1alpha1",
            "kind": "YurtStaticSet",
            "metadata": {"name": "yurt-hub", "namespace": NS},
            "spec": {
                "staticPodManifest": "yurthub",
                "upgradeStrategy": {"type": "AdvancedRollingUpdate", "maxUnavailable": "10%"},
                "template": {
                    "metadata": {"labels": {"k8s-app": "yurt-hub"}},
                    "spec": {"containers": [{"name": "hub", "image": "edgehub:1"}]},
                },
            },
        }
        kubectl("apply", "--validate=strict", "-f", "-", input=json.dumps(body))
        kubectl(
            "patch", "yss", "yurt-hub", "-n", NS, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"totalNumber": 3, "readyNumber": 2, "upgradedNumber": 1,
                                          "observedGeneration": 1}}),
        )  # fmt: skip
        table = kubectl("get", "yss", "-n", NS).stdout.splitlines()
        assert table[0].split() == ["NAME", "AGE", "TOTAL", "READY", "UPGRADED"], table
        row = table[1].split()
        assert row[0] == "yurt-hub" and row[2:] == ["3", "2", "1"], table
        got = json.loads(kubectl("get", "yurtstaticset", "yurt-hub", "-n", NS, "-o", "json").stdout)
        assert got["spec"]["upgradeStrategy"]["maxUnavailable"] == "10%"
        assert got["spec"]["template"]["spec"]["containers"][0]["image"] == "edgehub:1"
        # The status needs OpenYurt's three numbers.
        refused = kubectl(
            "patch", "yss", "yurt-hub", "-n", NS, "--subresource=status", "--type=json",
            "-p", '[{"op": "remove", "path": "/status/totalNumber"}]', check=False,
        )  # fmt: skip
        assert refused.returncode != 0 and "totalNumber" in refused.stderr
    finally:
        kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_the_manager_roles_grant_the_controller_and_no_more(
    real_cluster: realcluster.RealCluster,
) -> None:
    kubectl = real_cluster.kubectl
    kubectl("apply", "-f", str(REPO / "manifests/discovery/00-namespace.yaml"))
    kubectl("apply", "-f", str(REPO / "manifests/manager/rbac.yaml"))
    kubectl("apply", "-f", str(REPO / "manifests/manager/staticset-rbac.yaml"))

    def can(*args: str) -> bool:
        done = kubectl("auth", "can-i", *args, f"--as={MANAGER}", check=False)
        return done.stdout.strip() == "yes"

    status = ("--subresource=status", "-n", "default")
    assert can("update", "yurtstaticsets.apps.openyurt.io", *status)
    assert can("update", "pods", *status)
    assert not can("update", "nodes", "--subresource=status")
    assert can("create", "configmaps", "-n", "default")
    assert can("watch", "leases.coordination.k8s.io/cloud-yurt-manager", "-n", "kube-system")
    assert not can("get", "leases.coordination.k8s.io/kube-controller-manager", "-n", "kube-system")
    assert not can("create", "yurtstaticsets.apps.openyurt.io", "-n", "default")
    # A node's Lease after its swap (by name), the revisions kept for undo; never a Pod update.
    assert can("get", "leases.coordination.k8s.io/edge-1", "-n", "kube-node-lease")
    assert not can("list", "leases.coordination.k8s.io", "-n", "kube-node-lease")
    assert can("create", "controllerrevisions.apps", "-n", "default")
    assert not can("update", "pods", "-n", "default")
    docs = [
        d
        for d in yaml.safe_load_all((REPO / "manifests/manager/staticset-rbac.yaml").read_text())
        if d
    ]
    assert {d["kind"] for d in docs} == {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
