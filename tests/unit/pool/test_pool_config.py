"""Pool-scoped resource lists and the ``leader-hub-<pool>`` ConfigMap (reference §8.1, §8.3)."""

from __future__ import annotations

import pytest

from yurthub.pool import gvrs, leaderconfigs

SVC, EPS = gvrs.SERVICES, gvrs.ENDPOINTSLICES


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/v1/services,discovery.k8s.io/v1/endpointslices", (SVC, EPS)),
        (" /v1/services , ,/v1/services", (SVC,)),
        ("", ()),
        (
            "apps.openyurt.io/v1beta2/nodepools",
            (gvrs.Gvr("apps.openyurt.io", "v1beta2", "nodepools"),),
        ),
    ],
)
def test_parse_list(text: str, expected: tuple[gvrs.Gvr, ...]) -> None:
    assert gvrs.parse_list(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("services", "is not group/version/resource"),
        ("v1/services", "is not group/version/resource"),
        ("/v1/services/x", "is not group/version/resource"),
        ("//services", "the version"),
        ("/v1/", "the resource"),
        ("Apps/v1/deployments", "the group"),
        ("/v1/Services", "the resource"),
    ],
)
def test_parse_refuses(text: str, why: str) -> None:
    with pytest.raises(gvrs.GvrError, match=why):
        gvrs.parse_list(text)


def test_paths_and_rendering() -> None:
    assert SVC.path() == "/api/v1/services"
    assert (
        EPS.path("kube-system") == "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices"
    )
    assert EPS.api_version == "discovery.k8s.io/v1" and SVC.api_version == "v1"
    assert gvrs.render_list((EPS, SVC)) == "/v1/services,discovery.k8s.io/v1/endpointslices"
    assert gvrs.keys((SVC,)) == frozenset({"/v1/services"})


GOOD = {
    "leaders": "edge-2/10.0.0.2,edge-1/10.0.0.1",
    "pool-scoped-metadata": "/v1/services",
    "interconnectivity": "true",
    "enable-leader-election": "true",
}


def test_parse_configmap() -> None:
    config = leaderconfigs.parse(GOOD)
    assert [leader.node for leader in config.leaders] == ["edge-1", "edge-2"]
    assert config.leaders[0].url(10269) == "https://10.0.0.1:10269"
    assert config.resources == (SVC,)
    assert config.enable_leader_election and config.interconnectivity


def test_ipv6_leader_url_and_absent_keys() -> None:
    config = leaderconfigs.parse({"leaders": "edge-1/fd00::0:1"})
    assert config.leaders[0].address == "fd00::1"
    assert config.leaders[0].url(10269) == "https://[fd00::1]:10269"
    assert config.resources is None  # the flag applies
    assert not config.enable_leader_election
    assert leaderconfigs.parse({"pool-scoped-metadata": ""}).resources == ()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({"leaders": "edge-1"}, "is not <node>/<ip>"),
        ({"leaders": "edge-1/"}, "is not <node>/<ip>"),
        ({"leaders": "Edge_1/10.0.0.1"}, "is not a node name"),
        ({"leaders": "edge-1/edge-1.example"}, "is not an IP address"),
        ({"leaders": "edge-1/0.0.0.0"}, "cannot be a leader"),
        ({"leaders": "edge-1/10.0.0.1,edge-1/10.0.0.2"}, "listed twice"),
        ({"enable-leader-election": "yes"}, "neither"),
        ({"interconnectivity": 1}, "not a string"),
        ({"pool-scoped-metadata": "services"}, "pool-scoped-metadata"),
        (
            {"leaders": ",".join(f"n{i}/10.0.{i // 250}.{i % 250 + 1}" for i in range(65))},
            "at most",
        ),
    ],
)
def test_malformed_configmaps_are_refused_naming_the_key(data: dict[str, object], why: str) -> None:
    with pytest.raises(leaderconfigs.ConfigMapError, match=why):
        leaderconfigs.parse(data)


@pytest.mark.parametrize(
    ("changes", "node", "expected"),
    [
        ({}, "edge-3", leaderconfigs.Source.POOL),
        ({}, "edge-1", leaderconfigs.Source.API),  # a leader reads the cloud itself
        ({"enable-leader-election": "false"}, "edge-3", leaderconfigs.Source.API),
        ({"leaders": ""}, "edge-3", leaderconfigs.Source.API),  # no eligible node in the pool
        ({"interconnectivity": "false"}, "edge-3", leaderconfigs.Source.API),
    ],
)
def test_source(changes: dict[str, str], node: str, expected: leaderconfigs.Source) -> None:
    config = leaderconfigs.parse({**GOOD, **changes})
    assert leaderconfigs.source(config, node) is expected


def test_is_leader() -> None:
    config = leaderconfigs.parse(GOOD)
    assert leaderconfigs.is_leader(config, "edge-1")
    assert not leaderconfigs.is_leader(config, "edge-3")
    off = leaderconfigs.parse({**GOOD, "enable-leader-election": "false"})
    assert not leaderconfigs.is_leader(off, "edge-1")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"enable-leader-election": "true", "leaders": ""}, True),
        ({"enable-leader-election": "true", "leaders": "n1/10.0.0.1"}, False),
        ({"enable-leader-election": "false", "leaders": ""}, False),
        ({"enable-leader-election": "true", "interconnectivity": "false"}, False),
    ],
)
def test_leaderless_means_leaders_wanted_but_none_named(
    data: dict[str, str], expected: bool
) -> None:
    assert leaderconfigs.leaderless(leaderconfigs.parse(data)) is expected
