"""Admission decisions: separate limits for long-running requests, a share per client."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from yurthub import fairness, requestinfo

LEASES = "/apis/coordination.k8s.io/v1/namespaces"


def info(method: str, path: str, ua: str = "kubelet/v1.32") -> requestinfo.RequestInfo:
    raw, _, qs = path.partition("?")
    query = [tuple(p.split("=", 1)) for p in qs.split("&") if p]
    return requestinfo.classify(method, raw, query, CIMultiDict({"User-Agent": ua}))


def test_long_running_requests_have_their_own_limit() -> None:
    admission = fairness.Admission(fairness.Limits(2, 3, 2, 3))
    assert [admission.admit("w", long_running=True) for _ in range(4)] == [
        None,
        None,
        None,
        "long-running",
    ]
    # Watches used up their room, not the room of short requests.
    assert admission.admit("kubelet", long_running=False) is None
    admission.release("w", long_running=True)
    assert admission.admit("w", long_running=True) is None


def test_every_client_has_a_share() -> None:
    admission = fairness.Admission(fairness.Limits(10, 10, 2, 2))
    assert admission.admit("a", False) is None and admission.admit("a", False) is None
    assert admission.admit("a", False) == "client-in-flight"
    assert admission.admit("b", False) is None
    assert admission.admit("a", True) is None and admission.admit("a", True) is None
    assert admission.admit("a", True) == "client-long-running"
    for _ in range(2):
        admission.release("a", False)
        admission.release("a", True)
    admission.release("b", False)
    assert admission.short == admission.long == 0 and admission.clients() == 0


def test_the_total_is_shared() -> None:
    admission = fairness.Admission(fairness.Limits(3, 1, 2, 1))
    assert admission.admit("a", False) is None and admission.admit("a", False) is None
    assert admission.admit("b", False) is None
    assert admission.admit("c", False) == "in-flight"


@pytest.mark.parametrize(
    ("method", "path", "ua", "exempt"),
    [
        ("PUT", f"{LEASES}/kube-node-lease/leases/n1", "kubelet/1", True),
        ("GET", f"{LEASES}/kube-node-lease/leases/n1", "kubelet/1", True),
        ("PUT", f"{LEASES}/kube-node-lease/leases/n2", "kubelet/1", False),
        ("GET", f"{LEASES}/other/leases/n1", "kubelet/1", False),
        ("GET", f"{LEASES}/kube-node-lease/leases?watch=1", "kubelet/1", False),
        ("GET", f"{LEASES}/kube-node-lease/leases?fieldSelector=metadata.name=n1&watch=1",
         "kubelet/1", False),
        ("GET", f"{LEASES}/kube-node-lease/leases", "kubelet/1", False),
        ("DELETE", f"{LEASES}/kube-node-lease/leases/n1", "kubelet/1", False),
        ("GET", "/api/v1/nodes/n1", "kubelet/1", True),
        ("PUT", "/api/v1/nodes/n1", "kubelet/1", True),
        ("PATCH", "/api/v1/nodes/n1/status", "kubelet/1", True),
        ("GET", "/api/v1/nodes?fieldSelector=metadata.name=n1", "kubelet/1", False),
        ("GET", "/api/v1/nodes?fieldSelector=metadata.name=n1&watch=1", "kubelet/1", False),
        ("GET", "/api/v1/watch/nodes/n1", "kubelet/1", False),
        ("GET", "/api/v1/nodes/n1/proxy/metrics", "kubelet/1", False),
        ("GET", "/api/v1/nodes/n2", "kubelet/1", False),
        ("GET", "/api/v1/nodes/n1", "kubectl/1", False),
        ("GET", "/api/v1/pods", "kubelet/1", False),
        # A User-Agent is what any local process sends: it buys nothing.
        ("GET", "/api/v1/pods", "edgehub/0.1", False),
        ("GET", "/api/v1/pods?watch=1", "yurthub/1.0", False),
        ("GET", "/api/v1/services", "multiplexer-proxy-n1", False),
        ("GET", "/api/v1/pods", "edgehub-heartbeat", False),
        ("GET", "/version", "kubelet/1", False),
    ],
)  # fmt: skip
def test_only_kubelets_heartbeat_is_exempt_by_what_it_asks(
    method: str, path: str, ua: str, exempt: bool
) -> None:
    assert fairness.exempt(info(method, path, ua), "n1", own=False) is exempt


@pytest.mark.parametrize(
    ("method", "path", "ua"),
    [
        ("GET", "/api/v1/pods?watch=1", "yurthub/edgehub"),
        ("GET", "/api/v1/services?watch=1", "multiplexer-proxy-n1"),
        ("GET", "/apis", ""),
        ("GET", "/api/v1/pods", "anything/1"),
    ],
)
def test_the_hubs_own_requests_are_exempt_whatever_they_say(
    method: str, path: str, ua: str
) -> None:
    assert fairness.exempt(info(method, path, ua), "n1", own=True)


def test_no_node_name_exempts_no_node() -> None:
    assert not fairness.exempt(info("GET", "/api/v1/nodes/", "kubelet/1"), "", own=False)


def test_a_token_makes_its_own_client() -> None:
    request = info("GET", "/api/v1/pods", "python-requests/2.31")
    mine, yours = fairness.client_key(request, "token-a"), fairness.client_key(request, "token-b")
    assert mine != yours and mine.startswith("python-requests#")
    assert "token-a" not in mine
    assert fairness.client_key(request, "") == "python-requests"
