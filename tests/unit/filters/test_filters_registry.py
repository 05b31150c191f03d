"""Which filters a request gets (reference §10.4 approver and configuration manager)."""

from __future__ import annotations

import pytest

from yurthub import requestinfo
from yurthub.filters import registry


def approve(a: registry.Approver, user_agent: str, verb: str, resource: str) -> set[str]:
    return set(a.approve(requestinfo.component_of(user_agent.lower()), verb, resource))


@pytest.mark.parametrize(
    ("user_agent", "verb", "resource", "expected"),
    [
        ("kubelet/v1.20.11", "list", "services", {"masterservice"}),
        ("kubelet/v1.20.11", "watch", "services", {"masterservice"}),
        ("kube-proxy/v1.20.11", "list", "services", {"discardcloudservice", "nodeportisolation"}),
        ("kube-proxy/v1.20.11", "watch", "services", {"discardcloudservice", "nodeportisolation"}),
        (
            "kube-proxy/v1.20.11",
            "list",
            "endpointslices",
            {"servicetopology", "forwardkubesvctraffic"},
        ),
        (
            "kube-proxy/v1.20.11",
            "watch",
            "endpointslices",
            {"servicetopology", "forwardkubesvctraffic"},
        ),
        ("nginx-ingress-controller/v1.1.0", "list", "endpoints", {"servicetopology"}),
        ("nginx-ingress-controller/v1.1.0", "watch", "endpoints", {"servicetopology"}),
        ("", "list", "services", set()),
        ("yurthub", "list", "configmaps", set()),
        ("unknown-agent/1.0", "list", "services", set()),
        # table rows beyond the pinned ones
        ("kubelet/v1.30", "get", "pods", {"serviceenvupdater"}),
        ("kubelet/v1.30", "patch", "pods", {"serviceenvupdater"}),
        ("kubelet/v1.30", "get", "configmaps", {"inclusterconfig"}),
        ("kubelet/v1.30", "get", "services", set()),
        ("kubelet/v1.30", "update", "pods", set()),
        ("coredns/1.11", "watch", "endpointslices", {"servicetopology"}),
        ("hollow-proxy/v1.37", "list", "services", {"discardcloudservice", "nodeportisolation"}),
        ("multiplexer-proxy-node1", "list", "services", set()),
        ("edgehub/0.1", "list", "services", set()),
    ],
)
def test_approver_defaults(user_agent: str, verb: str, resource: str, expected: set[str]) -> None:
    assert approve(registry.Approver(node_name="node1"), user_agent, verb, resource) == expected


def test_chain_order_is_the_table_order() -> None:
    a = registry.Approver(node_name="n")
    assert a.approve("kube-proxy", "watch", "endpointslices") == (
        "servicetopology",
        "forwardkubesvctraffic",
    )
    assert a.approve("kube-proxy", "list", "services") == (
        "discardcloudservice",
        "nodeportisolation",
    )


def test_configmap_adds_components_live_and_cannot_remove_defaults() -> None:
    a = registry.Approver(node_name="n")
    assert not a.synced
    assert a.apply_configmap({"cache_agents": "foo, bar", "servicetopology": "foo"})
    assert a.synced
    assert approve(a, "foo", "list", "endpoints") == {"servicetopology"}
    assert approve(a, "foo", "watch", "endpointslices") == {"servicetopology"}
    assert approve(a, "kube-proxy", "watch", "endpointslices") == {
        "servicetopology",
        "forwardkubesvctraffic",
    }
    assert a.apply_configmap(
        {"servicetopology": "zag", "nodeportisolation": "zag", "discardcloudservice": " zag,"}
    )
    assert approve(a, "foo", "list", "endpoints") == set()
    assert approve(a, "zag", "list", "services") == {"nodeportisolation", "discardcloudservice"}
    assert not a.apply_configmap(
        {"servicetopology": "zag", "nodeportisolation": "zag", "discardcloudservice": "zag"}
    )
    # Naming a default component changes nothing; an empty value adds nothing.
    a.apply_configmap({"masterservice": "kubelet", "servicetopology": ""})
    assert approve(a, "kubelet", "list", "services") == {"masterservice"}
    # Deleting the ConfigMap restores the defaults.
    assert a.apply_configmap(None)
    assert approve(a, "zag", "list", "services") == set()
    assert approve(a, "kube-proxy", "list", "services") == {
        "discardcloudservice",
        "nodeportisolation",
    }


def test_configmap_wildcard_is_not_a_component() -> None:
    a = registry.Approver(node_name="n")
    a.apply_configmap({"servicetopology": "*, cilium"})
    assert a.additions == {"servicetopology": ("cilium",)}
    assert approve(a, "anything", "list", "endpointslices") == set()


def test_configmap_cannot_filter_the_hub_itself() -> None:
    a = registry.Approver(node_name="node1")
    a.apply_configmap({"masterservice": "yurthub, multiplexer-proxy-node1, edgehub"})
    assert approve(a, "yurthub/edgehub", "list", "services") == set()
    assert approve(a, "multiplexer-proxy-node1", "list", "services") == set()


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({}, registry.NAMES),
        ({"enabled": False}, ()),
        ({"disabled": ["*"]}, ()),
        (
            {"disabled": ["masterservice", "servicetopology"]},
            tuple(n for n in registry.NAMES if n not in ("masterservice", "servicetopology")),
        ),
        (
            {"cloud_mode": True},
            ("masterservice", "nodeportisolation", "servicetopology", "inclusterconfig"),
        ),
    ],
)
def test_switches(kwargs: dict[str, object], names: tuple[str, ...]) -> None:
    a = registry.Approver(node_name="n", **kwargs)  # type: ignore[arg-type]
    assert a.names == names
    a.apply_configmap({n: "extra" for n in registry.NAMES})
    assert {
        f
        for r in ("services", "endpointslices", "configmaps", "pods")
        for v in ("list", "watch", "get")
        for f in a.approve("extra", v, r)
    } == set(names)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("masterservice, ServiceTopology ,masterservice", ("masterservice", "servicetopology")),
        ("*", ("*",)),
    ],
)
def test_parse_names(text: str, expected: tuple[str, ...]) -> None:
    assert registry.parse_names(text) == expected


def test_parse_names_refuses_a_typo() -> None:
    with pytest.raises(registry.UnknownFilter, match=r"servicetoplogy.*known: masterservice"):
        registry.parse_names("masterservice,servicetoplogy")
