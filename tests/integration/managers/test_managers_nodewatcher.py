"""The node watcher of ``edgehub manager`` and a real agent on the simulated apiserver, when the
agent's Node does not exist: a node the watcher never saw keeps its Instances (no fight with
its agent), a node it saw and then lost is cleaned once and then only after a back-off, and
the agent says once, clearly, that its node does not exist.

Nothing here waits by sleeping: each test waits until the agent has written its Instances and
the watcher has processed the last event about them (its queue holds the node's key no more,
or only for later), then counts what was written."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from managers_support import (
    akri_settings,
    configuration,
    eventually,
    install_crds,
    service_account_dir,
)

from discovery.agent import running as agent_running
from discovery.agent import settings as agent_settings
from kubecontrol import controlling
from managers import running
from yurthub.testing import simapiserver

DEVICES = {"name": "debugEcho", "discoveryDetails": "descriptions: [a, b]"}


@contextlib.asynccontextmanager
async def agent(
    sim: simapiserver.SimApiserver, tmp_path: Path, node: str
) -> AsyncIterator[agent_running.Agent]:
    s = agent_settings.AgentSettings(
        node_name=node,
        kube=agent_settings.KubeSettings(kubeconfig=Path(sim.kubeconfig_path)),
        discovery_handlers_dir=None,
        embedded_handlers=("debugEcho",),
        handler_environ={"DEBUG_ECHO_AVAILABILITY_FILE": str(tmp_path / "available")},
        device_plugins_dir=tmp_path / node / "dp",
        pod_resources_socket=None,
        cdi_dir=tmp_path / node / "cdi",
        metrics_port=None,
        timings=agent_settings.Timings(
            backoff_initial=0.05,
            backoff_cap=0.3,
            settle=0.2,
            node_check_initial=0.02,
            node_check_cap=0.05,
        ),
    )
    async with agent_running.running(s) as started:
        yield started


def instances_of(sim: simapiserver.SimApiserver, node: str) -> dict[str, dict[str, Any]]:
    return {
        i["metadata"]["name"]: i
        for i in sim.state.list("instances.akri.sh", "default")
        if node in i["spec"]["nodes"]
    }


def written(sim: simapiserver.SimApiserver, verb: str) -> list[str]:
    return [
        r.name
        for r in sim.audit_log()
        if r.verb == verb and r.resource == "instances" and r.code < 300
    ]


async def settle(sim: simapiserver.SimApiserver, check: Callable[[], bool]) -> None:
    """``eventually(check)``, saying how many Instances were deleted meanwhile if it fails (a
    watcher that fights the agent never settles)."""
    try:
        await eventually(check)
    except AssertionError:
        deleted = written(sim, "delete")
        raise AssertionError(f"never settled; {len(deleted)} Instance deletions") from None


def watcher_has(
    watcher: controlling.Controller, node: str, names: set[str], uids: set[str] | None = None
) -> bool:
    """The watcher's cache holds exactly these Instances of ``node`` (with these uids)."""
    cached = {
        obj["metadata"]["name"]: obj["metadata"]["uid"]
        for obj in watcher.reflectors[1].store.values()
        if node in obj["spec"].get("nodes", [])
    }
    return set(cached) == names and (uids is None or set(cached.values()) == uids)


async def test_instances_of_a_node_never_seen_are_left_alone(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    sim = sim_apiserver
    install_crds(sim)
    account = service_account_dir(sim, tmp_path / "sa")
    sim.state.create(configuration(discoveryHandler=DEVICES))
    ghost = "ghost-node"  # a mistyped --node-name: no such Node
    key = ("", ghost)
    async with (
        running.running(akri_settings(sim, account, controllers=("nodewatcher",))) as manager,
        agent(sim, tmp_path, ghost) as node_agent,
    ):
        (watcher,) = manager.controllers
        check = node_agent.node_check
        assert check is not None

        def settled() -> bool:
            ours = instances_of(sim, ghost)
            return (
                len(ours) == 2
                and watcher_has(watcher, ghost, set(ours))
                # the last event about them has been processed, and nothing is scheduled
                and watcher.queue.pending(key) is None
                and not watcher.queue.held(key)
                # the agent asked for its Node again and again
                and check.attempts >= 3
            )

        await settle(sim, settled)
        assert written(sim, "delete") == []
        assert len(written(sim, "create")) == 2
        assert check.exists is False

        # The node registers after all (kubelet started late): said once, too.
        sim.state.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": ghost}})
        await eventually(lambda: check.exists is True)

    def said(text: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if text in r.getMessage()]

    # Once each, however often the agent asked and the watcher looked.
    (line,) = said(f"node {ghost} does not exist in the cluster")
    assert "--node-name" in line
    (line,) = said(f"Instances name node {ghost}, which does not exist")
    assert "left alone" in line
    assert len(said(f"node {ghost} now exists in the cluster")) == 1


async def test_a_deleted_node_whose_agent_runs_on_is_cleaned_then_backed_off(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    install_crds(sim)
    account = service_account_dir(sim, tmp_path / "sa")
    sim.state.create(configuration(discoveryHandler=DEVICES))
    node = "edge-node-2"  # a seeded, Ready node
    key = ("", node)
    own = akri_settings(sim, account, controllers=("nodewatcher",))
    own = dataclasses.replace(
        own,
        node_watcher=dataclasses.replace(
            own.node_watcher, reclean_initial=600.0, reclean_cap=600.0
        ),
    )
    async with running.running(own) as manager, agent(sim, tmp_path, node) as node_agent:
        (watcher,) = manager.controllers
        await eventually(lambda: len(instances_of(sim, node)) == 2)
        first = {i["metadata"]["uid"] for i in instances_of(sim, node).values()}
        await eventually(lambda: watcher_has(watcher, node, set(instances_of(sim, node))))
        assert node_agent.node_check is not None and node_agent.node_check.exists is True

        # Deleted while its agent runs on: cleaned once; the agent writes them back.
        sim.state.delete("nodes", None, node)

        def written_back() -> bool:
            ours = instances_of(sim, node)
            uids = {i["metadata"]["uid"] for i in ours.values()}
            return (
                len(ours) == 2
                and not uids & first
                and watcher_has(watcher, node, set(ours), uids)
                # processed, and looked at again only when the back-off ends
                and (watcher.queue.pending(key) or 0.0) > 60.0
                and not watcher.queue.held(key)
            )

        await settle(sim, written_back)
        assert sorted(written(sim, "delete")) == sorted(i for i in instances_of(sim, node)), (
            "one cleaning, not a fight"
        )
        assert len(written(sim, "create")) == 4
