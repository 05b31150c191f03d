"""What the manager's autonomy manifests promise: its ClusterRole grants exactly what the
autonomy controller does to the manager's ServiceAccount, the ValidatingAdmissionPolicy holds
that same identity, and the Deployment tells the controller the cluster's default tolerations.
(The real apiserver enforcing both is tests/e2e/cluster/test_node_autonomy.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from manifests_support import MANIFESTS, one
from test_manifests_contract import container, manager_deployment, parse

from managers import autonomy

AUTONOMY_RBAC = MANIFESTS / "manager" / "autonomy-rbac.yaml"
POLICY = MANIFESTS / "manager" / "autonomy-policy.yaml"


def manager_account() -> dict[str, Any]:
    return one(MANIFESTS / "manager" / "rbac.yaml", "ServiceAccount")


def test_the_autonomy_role_is_bound_to_the_manager_and_grants_exactly_its_requests() -> None:
    account = manager_account()
    role = one(AUTONOMY_RBAC, "ClusterRole")
    binding = one(AUTONOMY_RBAC, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    grants = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert grants == {
        ("", autonomy.NODES.plural, "list"),
        ("", autonomy.NODES.plural, "watch"),
        ("", autonomy.PODS.plural, "list"),
        ("", autonomy.PODS.plural, "watch"),
        ("", autonomy.PODS.plural, "patch"),
    }


def test_the_policy_holds_the_managers_identity_to_pod_updates() -> None:
    account = manager_account()["metadata"]
    policy = one(POLICY, "ValidatingAdmissionPolicy")
    binding = one(POLICY, "ValidatingAdmissionPolicyBinding")
    username = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"].strip() == f"request.userInfo.username == '{username}'"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}
    ]
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }


def test_the_deployment_gives_the_apiservers_default_tolerations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, params = parse(container(manager_deployment()), monkeypatch)
    # kube-apiserver's own defaults: an operator who changed them changes these too.
    assert params["default_not_ready_toleration_seconds"] == 300
    assert params["default_unreachable_toleration_seconds"] == 300
