"""The seven filters as pure functions: reference §10.4's pinned cases, then our own edges.

Every filter: unchanged objects come back as the very same object (no re-encode), changed
ones as a new object (the input is never mutated), dropped ones as None.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from filter_samples import (
    HUB,
    kubernetes_service,
    pod,
    pod_list,
    service,
    slice_,
    world,
)

from yurthub.filters import (
    discardcloudservice,
    forwardkubesvctraffic,
    inclusterconfig,
    inputs,
    masterservice,
    nodeportisolation,
    serviceenvupdater,
    servicetopology,
)


def run(function: Any, obj: dict[str, Any], kind: str, w: inputs.Inputs) -> Any:
    """Apply and check the contract: the input is never changed."""
    before = copy.deepcopy(obj)
    out = function(obj, kind, w)
    assert obj == before, "a filter mutated its input"
    return out


# --- masterservice (filter_test.go:46) -------------------------------------------------------


def test_masterservice_points_the_kubernetes_service_at_the_hub() -> None:
    out = run(masterservice.apply, kubernetes_service(), "Service", world())
    assert out["spec"]["clusterIP"] == "169.251.2.1"
    assert out["spec"]["clusterIPs"] == ["169.251.2.1"]
    assert out["spec"]["ports"] == [
        {"name": "https", "port": 10268, "protocol": "TCP", "targetPort": 6443}
    ]
    assert out["metadata"] == kubernetes_service()["metadata"]


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        (service("svc"), "Service"),
        (service("kubernetes", "kube-system"), "Service"),
        (pod_list(), "PodList"),
        (kubernetes_service(), "Endpoints"),
    ],
)
def test_masterservice_leaves_others(obj: dict[str, Any], kind: str) -> None:
    assert run(masterservice.apply, obj, kind, world()) is obj


def test_masterservice_only_the_first_https_port_and_idempotent() -> None:
    svc = kubernetes_service()
    svc["spec"]["ports"] = [
        {"name": "metrics", "port": 9000},
        {"name": "https", "port": 443},
        {"name": "https", "port": 444},
    ]
    out = run(masterservice.apply, svc, "Service", world())
    assert [p["port"] for p in out["spec"]["ports"]] == [9000, 10268, 444]
    # Already pointing at the hub: the same object comes back (nothing to re-encode).
    assert masterservice.apply(out, "Service", world()) is out


def test_masterservice_without_ports_or_spec() -> None:
    svc = kubernetes_service()
    del svc["spec"]["ports"]
    out = run(masterservice.apply, svc, "Service", world())
    assert "ports" not in out["spec"] and out["spec"]["clusterIP"] == HUB.host
    bare = {"metadata": {"name": "kubernetes", "namespace": "default"}}
    assert run(masterservice.apply, bare, "Service", world())["spec"]["clusterIPs"] == [HUB.host]


# --- discardcloudservice (filter_test.go:46) -------------------------------------------------

DISCARD = {"svc.openyurt.io/discard": "true"}


@pytest.mark.parametrize(
    ("obj", "kind", "dropped"),
    [
        (service("svc1", type_="LoadBalancer", annotations=DISCARD), "Service", True),
        (service("x-tunnel-server-internal-svc", "kube-system"), "Service", True),
        (service("svc1", type_="LoadBalancer"), "Service", False),
        (pod_list(), "PodList", False),
        # Our edges: the annotation only counts on a LoadBalancer, and only as "true".
        (service("svc1", type_="ClusterIP", annotations=DISCARD), "Service", False),
        (
            service("svc1", type_="LoadBalancer", annotations={"svc.openyurt.io/discard": "1"}),
            "Service",
            False,
        ),
        (service("x-tunnel-server-internal-svc", "default"), "Service", False),
    ],
)
def test_discardcloudservice(obj: dict[str, Any], kind: str, dropped: bool) -> None:
    out = run(discardcloudservice.apply, obj, kind, world())
    assert (out is None) if dropped else (out is obj)


# --- inclusterconfig (filter_test.go:46) -----------------------------------------------------

KUBE_PROXY_CONF = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
      kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
"""


def configmap(data: dict[str, str], name: str = "kube-proxy", ns: str = "kube-system") -> Any:
    return {"kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data}


def test_inclusterconfig_comments_the_kubeconfig_line_and_nothing_else() -> None:
    cm = configmap({"config.conf": KUBE_PROXY_CONF, "kubeconfig.conf": "kubeconfig: x"})
    out = run(inclusterconfig.apply, cm, "ConfigMap", world())
    assert out["data"]["config.conf"] == KUBE_PROXY_CONF.replace(
        "      kubeconfig: /var/lib/kube-proxy/kubeconfig.conf",
        "      #kubeconfig: /var/lib/kube-proxy/kubeconfig.conf",
    )
    assert out["data"]["kubeconfig.conf"] == "kubeconfig: x"  # only config.conf
    # Idempotent: a commented line is not commented again.
    assert inclusterconfig.apply(out, "ConfigMap", world()) is out


@pytest.mark.parametrize(
    "obj",
    [
        configmap({"config.conf": "clientConnection:\n  qps: 0\n"}),
        configmap({"config.conf": KUBE_PROXY_CONF}, name="other"),
        configmap({"config.conf": KUBE_PROXY_CONF}, ns="default"),
        configmap({"other.conf": KUBE_PROXY_CONF}),
        {"kind": "ConfigMap", "metadata": {"name": "kube-proxy", "namespace": "kube-system"}},
        pod_list(),
    ],
)
def test_inclusterconfig_leaves_others(obj: dict[str, Any]) -> None:
    assert run(inclusterconfig.apply, obj, obj["kind"], world()) is obj


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("kubeconfig: C:\\kube\\config", "#kubeconfig: C:\\kube\\config"),  # YurtHub keeps it
        ("  kubeconfig : /a", "  #kubeconfig : /a"),
        ("\tkubeconfig:", "\t#kubeconfig:"),
        ("  # kubeconfig: /a", "  # kubeconfig: /a"),
        ("  kubeconfigPath: /a", "  kubeconfigPath: /a"),
        ("  mykubeconfig: /a", "  mykubeconfig: /a"),
    ],
)
def test_inclusterconfig_lines(line: str, expected: str) -> None:
    assert inclusterconfig.comment_kubeconfig(f"a: 1\n{line}\nb: 2") == f"a: 1\n{expected}\nb: 2"


# --- nodeportisolation (filter_test.go:78) ----------------------------------------------------

LISTEN = "nodeport.openyurt.io/listen"


def nodeport(value: str | None, type_: str = "NodePort") -> dict[str, Any]:
    return service("svc", type_=type_, annotations=None if value is None else {LISTEN: value})


@pytest.mark.parametrize(
    ("w", "obj", "kept"),
    [
        (world(pool_flag="foo"), nodeport("-foo"), False),
        (world(pool_flag="bar"), nodeport("foo"), False),
        # node foo whose pool is an annotation only: in no pool -> kept
        (world(node="foo"), nodeport("foo,-foo"), True),
        (world(pool_flag="foo"), nodeport("foo"), True),
        (world(pool_flag="foo"), nodeport("*"), True),
        (world(node="bar"), nodeport("-foo,*"), True),
        (world(node="notfound"), nodeport("foo"), True),
        (world(pool_flag="foo"), service("svc", type_="ClusterIP"), True),
        # Our edges: the pool from the node's label; LoadBalancer too; precedence; empty value.
        (world(pool_label="foo"), nodeport("-foo"), False),
        (world(pool_label="foo"), nodeport("bar, foo "), True),
        (world(pool_flag="foo"), nodeport("-foo", "LoadBalancer"), False),
        (world(pool_flag="foo"), nodeport("-foo,*"), False),
        # A pool named twice: its first mention decides (YurtHub's rule), whichever sign.
        (world(pool_flag="foo"), nodeport("-foo,foo"), False),
        (world(pool_flag="foo"), nodeport("foo,-foo"), True),
        (world(pool_flag="foo"), nodeport(" -foo , foo ,*"), False),
        (world(pool_flag="foo"), nodeport("bar,-bar,foo,-foo"), True),
        # "*" named twice likewise: "-*" first leaves no wildcard.
        (world(pool_flag="foo"), nodeport("-*,*"), False),
        (world(pool_flag="foo"), nodeport("*,-*"), True),
        (world(pool_flag="foo"), nodeport(""), False),
        (world(pool_flag="foo"), nodeport(None), True),
        (world(pool_flag="foo"), nodeport("-foo", "ClusterIP"), True),
    ],
)
def test_nodeportisolation(w: inputs.Inputs, obj: dict[str, Any], kept: bool) -> None:
    out = run(nodeportisolation.apply, obj, "Service", w)
    assert (out is obj) if kept else (out is None)


def test_nodeportisolation_leaves_pod_lists() -> None:
    obj = pod_list()
    assert run(nodeportisolation.apply, obj, "PodList", world(pool_flag="foo")) is obj


# --- forwardkubesvctraffic (filter_test.go:49) ------------------------------------------------


def kubernetes_slice(address_type: str = "IPv4") -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "addressType": address_type,
        "endpoints": [
            {"addresses": ["172.16.0.14"], "conditions": {"ready": True}},
            {"addresses": ["172.16.0.15"], "conditions": {"ready": True}},
        ],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    }


def test_forwardkubesvctraffic_sends_kubernetes_to_the_hub() -> None:
    out = run(forwardkubesvctraffic.apply, kubernetes_slice(), "EndpointSlice", world())
    assert out["endpoints"] == [{"addresses": ["169.251.2.1"], "conditions": {"ready": True}}]
    assert out["ports"] == [{"name": "https", "port": 10268, "protocol": "TCP"}]
    assert forwardkubesvctraffic.apply(out, "EndpointSlice", world()) is out


@pytest.mark.parametrize(
    ("obj", "kind", "w"),
    [
        (slice_("foo", "foo", ["node1"]), "EndpointSlice", world()),
        (pod_list(), "PodList", world()),
        # Our edges: a family the hub is not of; a hub known by name only.
        (kubernetes_slice("IPv6"), "EndpointSlice", world()),
        (kubernetes_slice(), "EndpointSlice", world(hub=inputs.Address("hub.local", 1))),
    ],
)
def test_forwardkubesvctraffic_leaves_others(
    obj: dict[str, Any], kind: str, w: inputs.Inputs
) -> None:
    assert run(forwardkubesvctraffic.apply, obj, kind, w) is obj


def test_forwardkubesvctraffic_ipv6_hub() -> None:
    w = world(hub=inputs.Address("fd00::2:1", 10268))
    out = run(forwardkubesvctraffic.apply, kubernetes_slice("IPv6"), "EndpointSlice", w)
    assert out["endpoints"][0]["addresses"] == ["fd00::2:1"]
    assert run(forwardkubesvctraffic.apply, kubernetes_slice(), "EndpointSlice", w)["endpoints"]


# --- serviceenvupdater (filter_test.go:51) ----------------------------------------------------

H, P = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"


def env_of(p: dict[str, Any], field: str = "containers") -> list[dict[str, str]]:
    return [{e["name"]: e["value"] for e in c.get("env", [])} for c in p["spec"][field]]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ([(H, "some-host"), (P, "1234")], {H: "169.251.2.1", P: "10268"}),
        ([(P, "1234")], {P: "10268"}),
        ([(H, "some-host")], {H: "169.251.2.1"}),
        (
            [(H, "169.251.2.1"), ("OTHER", "x"), (P, "1234")],
            {H: HUB.host, "OTHER": "x", P: "10268"},
        ),
    ],
)
def test_serviceenvupdater_rewrites_existing_variables(
    env: list[tuple[str, str]], expected: dict[str, str]
) -> None:
    out = run(serviceenvupdater.apply, pod([env]), "Pod", world())
    assert env_of(out) == [expected]


@pytest.mark.parametrize(
    "obj",
    [
        pod([[(H, "169.251.2.1"), (P, "10268")]]),  # already correct
        pod([[("OTHER", "x")]]),  # absent: not added
        pod([[]]),
        pod_list(),
        service("svc"),
    ],
)
def test_serviceenvupdater_leaves_others(obj: dict[str, Any]) -> None:
    assert run(serviceenvupdater.apply, obj, obj["kind"], world()) is obj


def test_serviceenvupdater_every_container_and_init_containers() -> None:
    p = pod([[(H, "a")], [("X", "y")], [(P, "1")]], init=[[(H, "b"), (P, "2")]])
    out = run(serviceenvupdater.apply, p, "Pod", world())
    assert env_of(out) == [{H: HUB.host}, {"X": "y"}, {P: "10268"}]
    # On purpose beyond YurtHub: an init container that dials the apiserver goes via the hub.
    assert env_of(out, "initContainers") == [{H: HUB.host, P: "10268"}]


def test_serviceenvupdater_value_from_is_overridden_by_a_value() -> None:
    p = pod([[]])
    p["spec"]["containers"][0]["env"] = [
        {"name": H, "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
    ]
    out = run(serviceenvupdater.apply, p, "Pod", world())
    assert out["spec"]["containers"][0]["env"][0]["value"] == HUB.host


# --- servicetopology (filter_test.go:63) ------------------------------------------------------

NODE_TOPO = {("default", "svc1"): "kubernetes.io/hostname"}
POOL_TOPO = {("default", "svc1"): "openyurt.io/nodepool"}
ZONE_TOPO = {("default", "svc1"): "kubernetes.io/zone"}
HANGZHOU = {"hangzhou": ["node1", "node3"], "shanghai": ["node2"]}


def nodes_of(obj: dict[str, Any]) -> list[str | None]:
    return [e.get("nodeName") for e in obj["endpoints"]]


@pytest.mark.parametrize(
    ("w", "expected"),
    [
        (world(services=NODE_TOPO), ["node1", "node1"]),
        (
            world(services=POOL_TOPO, pool_flag="hangzhou", pools=HANGZHOU),
            ["node1", "node1", "node3"],
        ),
        (
            world(services=ZONE_TOPO, pool_flag="hangzhou", pools=HANGZHOU),
            ["node1", "node1", "node3"],
        ),
        # the pool from the node's label
        (
            world(services=POOL_TOPO, pool_label="hangzhou", pools=HANGZHOU),
            ["node1", "node1", "node3"],
        ),
        # the node in no pool: node topology
        (world(services=POOL_TOPO, pools=HANGZHOU), ["node1", "node1"]),
    ],
)
def test_servicetopology_keeps_the_topology_endpoints(
    w: inputs.Inputs, expected: list[str]
) -> None:
    obj = slice_("svc1-abc", "svc1", ["node1", "node2", "node1", "node3"])
    out = run(servicetopology.apply, obj, "EndpointSlice", w)
    assert nodes_of(out) == expected
    assert {k: v for k, v in out.items() if k != "endpoints"} == {
        k: v for k, v in obj.items() if k != "endpoints"
    }


@pytest.mark.parametrize(
    "w",
    [
        world(),  # service unknown
        world(services={("default", "other"): "kubernetes.io/hostname"}),
        world(services={("default", "svc1"): "kubernetes.io/region"}),  # not a topology value
        world(services={("default", "svc1"): "kubernetes.io/hostname,openyurt.io/nodepool"}),
        world(services=POOL_TOPO, pool_flag="hangzhou"),  # pool's nodes unknown: never thin
        world(services=POOL_TOPO, pool_flag="nowhere", pools=HANGZHOU),
        world(
            services=POOL_TOPO,
            pool_flag="hangzhou",
            pools=HANGZHOU,
            topology=inputs.PoolTopology.NONE,
        ),
        # Pool topology off: a pool (or zone) Service is left alone whatever the node's pool,
        # even on a node in no pool (which must not fall back to its own endpoints).
        world(services=POOL_TOPO, topology=inputs.PoolTopology.NONE),
        world(services=ZONE_TOPO, topology=inputs.PoolTopology.NONE),
        world(services=POOL_TOPO, pool_label="hangzhou", topology=inputs.PoolTopology.NONE),
    ],
)
def test_servicetopology_leaves_the_slice(w: inputs.Inputs) -> None:
    obj = slice_("svc1-abc", "svc1", ["node1", "node2"])
    assert run(servicetopology.apply, obj, "EndpointSlice", w) is obj


def test_servicetopology_no_local_endpoints_is_an_empty_slice() -> None:
    obj = slice_("svc1-abc", "svc1", ["node2", "node3"])
    out = run(servicetopology.apply, obj, "EndpointSlice", world(services=NODE_TOPO))
    assert out["endpoints"] == [] and out["ports"] == obj["ports"]


def test_servicetopology_drops_endpoints_without_a_node() -> None:
    obj = slice_("svc1-abc", "svc1", [None, "node1", None])
    out = run(servicetopology.apply, obj, "EndpointSlice", world(services=NODE_TOPO))
    assert nodes_of(out) == ["node1"]


def test_servicetopology_v1beta1_topology_hostname() -> None:
    obj = slice_("svc1-abc", "svc1", [None, None])
    obj["apiVersion"] = "discovery.k8s.io/v1beta1"
    obj["endpoints"][0]["topology"] = {"kubernetes.io/hostname": "node1"}
    obj["endpoints"][1]["topology"] = {"kubernetes.io/hostname": "node2"}
    out = run(servicetopology.apply, obj, "EndpointSlice", world(services=NODE_TOPO))
    assert [e["topology"]["kubernetes.io/hostname"] for e in out["endpoints"]] == ["node1"]


@pytest.mark.parametrize(
    "obj",
    [
        {"kind": "Pod", "metadata": {"name": "svc1", "namespace": "default"}},
        slice_("x", None, ["node2"]),  # no service-name label
        {
            "metadata": {
                "name": "s",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "svc1"},
            },
            "endpoints": "garbage",
        },
    ],
)
def test_servicetopology_leaves_what_it_does_not_know(obj: dict[str, Any]) -> None:
    kind = obj.get("kind", "EndpointSlice")
    out = run(servicetopology.apply, obj, kind, world(services=NODE_TOPO))
    assert out is obj


def test_servicetopology_node_buckets() -> None:
    w = world(services=POOL_TOPO, pool_flag="hangzhou", topology=inputs.PoolTopology.NODEBUCKET)
    w.node_buckets.replace(
        [
            {
                "metadata": {"name": "hangzhou-a", "labels": {"openyurt.io/pool-name": "hangzhou"}},
                "nodes": [{"name": "node1"}],
            },
            {
                "metadata": {"name": "hangzhou-b", "labels": {"openyurt.io/pool-name": "hangzhou"}},
                "nodes": [{"name": "node3"}],
            },
            {
                "metadata": {"name": "shanghai-a", "labels": {"openyurt.io/pool-name": "shanghai"}},
                "nodes": [{"name": "node2"}],
            },
        ]
    )
    obj = slice_("svc1-abc", "svc1", ["node1", "node2", "node3"])
    assert nodes_of(run(servicetopology.apply, obj, "EndpointSlice", w)) == ["node1", "node3"]
    # A bucket moves node3 out of the pool: live.
    w.node_buckets.apply(
        "MODIFIED",
        {
            "metadata": {"name": "hangzhou-b", "labels": {"openyurt.io/pool-name": "hangzhou"}},
            "nodes": [],
        },
    )
    assert nodes_of(servicetopology.apply(obj, "EndpointSlice", w)) == ["node1"]


def endpoints_object(subsets: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "Endpoints",
        "metadata": {"name": "svc1", "namespace": "default"},
        "subsets": subsets,
    }


def test_servicetopology_filters_legacy_endpoints_too() -> None:
    obj = endpoints_object(
        [
            {
                "addresses": [{"ip": "1", "nodeName": "node1"}, {"ip": "2", "nodeName": "node2"}],
                "notReadyAddresses": [{"ip": "3", "nodeName": "node2"}],
                "ports": [{"port": 80}],
            },
            {"addresses": [{"ip": "4", "nodeName": "node2"}], "ports": [{"port": 81}]},
            {
                "notReadyAddresses": [{"ip": "5", "nodeName": "node1"}, {"ip": "6"}],
                "ports": [{"port": 82}],
            },
        ]
    )
    out = run(servicetopology.apply, obj, "Endpoints", world(services=NODE_TOPO))
    assert out["subsets"] == [
        {"addresses": [{"ip": "1", "nodeName": "node1"}], "ports": [{"port": 80}]},
        {"notReadyAddresses": [{"ip": "5", "nodeName": "node1"}], "ports": [{"port": 82}]},
    ]


def test_servicetopology_pool_topology_off_acts_on_hostname_only() -> None:
    """``--enable-node-pool=false`` without ``--enable-pool-service-topology``: only
    ``kubernetes.io/hostname`` thins; pool and zone Services keep every endpoint, on a node in
    no pool too (YurtHub checks the switch before it looks for the node's pool)."""
    off = inputs.PoolTopology.NONE
    remote_only = slice_("svc1-abc", "svc1", ["node2", "node3"])
    legacy = endpoints_object([{"addresses": [{"ip": "1", "nodeName": "node2"}]}])
    for services in (POOL_TOPO, ZONE_TOPO):
        w = world(services=services, topology=off)
        assert run(servicetopology.apply, remote_only, "EndpointSlice", w) is remote_only
        assert run(servicetopology.apply, legacy, "Endpoints", w) is legacy
    cut = run(
        servicetopology.apply, remote_only, "EndpointSlice", world(services=NODE_TOPO, topology=off)
    )
    assert cut["endpoints"] == []


def test_servicetopology_endpoints_unchanged_when_all_local() -> None:
    obj = endpoints_object([{"addresses": [{"ip": "1", "nodeName": "node1"}]}])
    assert run(servicetopology.apply, obj, "Endpoints", world(services=NODE_TOPO)) is obj


def test_servicetopology_follows_inputs_live() -> None:
    w = world(services=NODE_TOPO)
    obj = slice_("svc1-abc", "svc1", ["node1", "node2"])
    assert nodes_of(servicetopology.apply(obj, "EndpointSlice", w)) == ["node1"]
    w.services.apply(
        "MODIFIED", {"metadata": {"name": "svc1", "namespace": "default", "annotations": {}}}
    )
    assert servicetopology.apply(obj, "EndpointSlice", w) is obj
    w.services.apply(
        "ADDED", service("svc1", annotations={inputs.TOPOLOGY_ANNOTATION: "kubernetes.io/hostname"})
    )
    assert nodes_of(servicetopology.apply(obj, "EndpointSlice", w)) == ["node1"]
    w.services.apply("DELETED", service("svc1"))
    assert servicetopology.apply(obj, "EndpointSlice", w) is obj
