"""Agent set: defaults + flag + ConfigMap, applied live (reference §10.4 configuration manager)."""

from __future__ import annotations

import pytest

from yurthub.cache import agents


def test_defaults_include_the_node_multiplexer() -> None:
    agent_set = agents.AgentSet(node_name="foo")
    assert agent_set.current.names == {*agents.DEFAULT_AGENTS, "multiplexer-proxy-foo"}


def test_configmap_adds_replaces_and_deletion_restores() -> None:
    agent_set = agents.AgentSet(node_name="foo", flag_agents=("flagged",))
    assert agent_set.apply_configmap({"cache_agents": "foo, bar"})
    assert {"foo", "bar", "flagged", "kubelet"} <= agent_set.current.names
    assert agent_set.apply_configmap({"cache_agents": "foo, zag"})
    assert "bar" not in agent_set.current.names and "zag" in agent_set.current.names
    assert not agent_set.apply_configmap({"cache_agents": "foo,zag"})  # same set: no change
    assert agent_set.apply_configmap(None)
    assert agent_set.current.names == {*agents.DEFAULT_AGENTS, "multiplexer-proxy-foo", "flagged"}


def test_wildcard_from_configmap() -> None:
    agent_set = agents.AgentSet(node_name="n")
    assert not agent_set.allows("virt-handler")
    agent_set.apply_configmap({"cache_agents": "*"})
    assert agent_set.allows("virt-handler")
    agent_set.apply_configmap({"other": "x"})
    assert not agent_set.allows("virt-handler")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", ()), (" a, B ,a,,c ", ("a", "b", "c")), ("*", ("*",))],
)
def test_parse_agents(text: str, expected: tuple[str, ...]) -> None:
    assert agents.parse_agents(text) == expected


@pytest.mark.parametrize("component", ["", "kubelet-test", "go-http-client"])
def test_not_agents(component: str) -> None:
    assert not agents.AgentSet(node_name="n").allows(component)


def test_one_label_selector_names_every_configmap_of_the_hub() -> None:
    assert agents.label_selector(["yurt-hub-cfg"]) == "openyurt.io/configmap-name=yurt-hub-cfg"
    assert (
        agents.label_selector(["yurt-hub-cfg", "leader-hub-hz", "yurt-hub-cfg"])
        == "openyurt.io/configmap-name in (leader-hub-hz,yurt-hub-cfg)"
    )
