"""A device plugin that cannot be served or registered is contained, over real Unix sockets.

The plugin manager runs with a simulated kubelet (real gRPC) and posts its Events to the
simulated apiserver. Covered: a long real directory (names shortened to fit, still readable),
an unwritable directory (the new plugin fails, the others keep serving, the failure is logged
once, an Event is posted once, retries back off and succeed once the directory is fixed), a
registration kubelet refuses, and the whole agent outliving a directory too long for any socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from discovery import devices
from discovery.agent import discovered, metrics, naming, plugins, resources, running
from discovery.agent import settings as agent_settings
from discovery.testing import cluster
from discovery.testing import kubelet as sim_kubelet
from kubecontrol import events, kubeapi
from yurthub.testing import simapiserver

NODE = "node-a"
CONFIG = "akri-debug-echo"
REPO = Path(__file__).resolve().parents[3]
CRDS = [
    REPO / "manifests/crds/configurations.akri.sh.yaml",
    REPO / "manifests/crds/instances.akri.sh.yaml",
]
FAST = agent_settings.Timings(backoff_initial=0.05, backoff_cap=0.2, kubelet_poll=0.05)


def instance(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": naming.API_GROUP_VERSION,
        "kind": "Instance",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "resourceVersion": "1",
            "ownerReferences": [
                {
                    "apiVersion": naming.API_GROUP_VERSION,
                    "kind": "Configuration",
                    "name": CONFIG,
                    "uid": "config-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "configurationName": CONFIG,
            "cdiName": f"akri.sh/{CONFIG}={naming.instance_digest(name)}",
            "capacity": 1,
            "nodes": [NODE],
            "deviceUsage": {},
            "shared": True,
        },
    }


def named_devices(*ids: str) -> dict[str, discovered.NamedDevice]:
    found = [(devices.Device(i, {"DEV": i}), True) for i in ids]
    return dict(discovered.name_devices(CONFIG, found, NODE))


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@contextlib.contextmanager
def unwritable(directory: Path) -> Iterator[None]:
    """``directory`` refuses new entries, for root too (the immutable flag), else by mode."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot make a directory immutable here: {done.stderr!r}")
        undo = ["chattr", "-i", str(directory)]
    else:
        directory.chmod(0o500)
        undo = []
    try:
        probe = directory / "probe"
        with pytest.raises(OSError):
            probe.touch()
        yield
    finally:
        if undo:
            subprocess.run(undo, check=True)
        else:
            directory.chmod(0o700)


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[simapiserver.SimApiserver]:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim", seed="none") as server:
        yield server


@pytest.fixture
async def api(sim: simapiserver.SimApiserver) -> AsyncIterator[kubeapi.KubeApi]:
    client = await kubeapi.connect(None, Path(sim.kubeconfig_path), "edgehub-agent/test")
    try:
        yield kubeapi.KubeApi(client, request_timeout=5.0)
    finally:
        await client.close()


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and text in r.getMessage()
    ]


def events_for(sim: simapiserver.SimApiserver, reason: str) -> list[dict[str, Any]]:
    return [e for e in sim.state.list("events", "default") if e.get("reason") == reason]


@contextlib.asynccontextmanager
async def manager_running(
    directory: Path, api: kubeapi.KubeApi | None, reject: Callable[[str], str | None] | None = None
) -> AsyncIterator[tuple[plugins.Manager, sim_kubelet.SimKubelet]]:
    s = agent_settings.AgentSettings(node_name=NODE, device_plugins_dir=directory, timings=FAST)
    if api is None:
        from kubernetes_asyncio import client as k8s_client

        offline = k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:9"))
        api_used = kubeapi.KubeApi(offline, request_timeout=1.0)
        recorder = None
    else:
        offline = None
        api_used = api
        recorder = events.Recorder(api, NODE)
    manager = plugins.Manager(s, api_used, metrics.Metrics(), recorder)
    try:
        async with (
            sim_kubelet.SimKubelet(directory, reject=reject) as kubelet,
            asyncio.TaskGroup() as tg,
        ):
            task = tg.create_task(manager.run(), name="plugins under test")
            try:
                yield manager, kubelet
                assert not task.done(), "the plugin manager must outlive plugin failures"
            finally:
                task.cancel()
    finally:
        if offline is not None:
            await offline.close()


async def test_long_directory_gets_short_readable_socket_names(sockdir: Path) -> None:
    # 84 bytes, like the pytest tmp path of the original failure; kubelet.sock still fits.
    directory = sockdir / "d"
    directory = Path(str(directory) + "x" * (84 - len(os.fsencode(directory))))
    assert len(os.fsencode(directory)) == 84
    named = named_devices("dev0")
    (name,) = named
    async with manager_running(directory, None) as (manager, kubelet):
        manager.set_devices(("default", CONFIG), named, {})
        manager.on_instance_event("ADDED", instance(name, "uid-0"))
        await kubelet.wait_for_devices(f"akri.sh/{name}")
        await kubelet.wait_for_devices(f"akri.sh/{CONFIG}")
        endpoints = dict(kubelet.registrations)
        for resource in (f"akri.sh/{name}", f"akri.sh/{CONFIG}"):
            endpoint = endpoints[resource]
            assert len(os.fsencode(directory / endpoint)) <= naming.SOCKET_PATH_MAX
            assert endpoint.startswith("akri-d"), endpoint
        assert endpoints[f"akri.sh/{name}"] != endpoints[f"akri.sh/{CONFIG}"]
        assert manager.failed_plugins() == {}


async def test_unwritable_directory_fails_one_plugin_and_spares_the_rest(
    sockdir: Path,
    api: kubeapi.KubeApi,
    sim: simapiserver.SimApiserver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="discovery.agent.plugins")
    directory = sockdir / "dp"
    named = named_devices("dev0", "dev1")
    first, second = sorted(named)
    async with manager_running(directory, api) as (manager, kubelet):
        manager.set_devices(("default", CONFIG), {first: named[first]}, {})
        manager.on_instance_event("ADDED", instance(first, "uid-first"))
        await kubelet.wait_for_devices(f"akri.sh/{first}")
        await kubelet.wait_for_devices(f"akri.sh/{CONFIG}")

        with unwritable(directory):
            manager.set_devices(("default", CONFIG), named, {})
            manager.on_instance_event("ADDED", instance(second, "uid-second"))
            resource = f"akri.sh/{second}"
            await eventually(lambda: resource in manager.failed_plugins())
            await asyncio.sleep(1.0)  # several retries at the 0.2 s cap

            message = manager.failed_plugins()[resource]
            assert str(directory) in message and "cannot serve device plugin" in message
            assert len(warnings_about(caplog, f"cannot serve device plugin {resource}")) == 1
            await eventually(lambda: len(events_for(sim, plugins.START_FAILED)) == 1)
            (event,) = events_for(sim, plugins.START_FAILED)
            assert event["involvedObject"]["name"] == second
            assert event["involvedObject"]["uid"] == "uid-second"
            assert event["type"] == "Warning" and str(directory) in event["message"]

            # The plugin already serving carries on: its device updates still reach kubelet.
            assert f"akri.sh/{first}" not in manager.failed_plugins()
            updated = instance(first, "uid-first")
            updated["spec"]["deviceUsage"] = {f"{first}-0": "node-b"}
            manager.on_instance_event("MODIFIED", updated)
            await kubelet.wait_for_devices(
                f"akri.sh/{first}", lambda d: d == {f"{first}-0": "Unhealthy"}
            )
            assert resource not in kubelet.plugins

            # A plugin stopping cannot remove its socket here either: still not a crash.
            manager.on_instance_event("DELETED", instance(first, "uid-first"))
            await eventually(
                lambda: bool(warnings_about(caplog, f"akri.sh/{first}: cannot remove"))
            )
            assert f"akri.sh/{first}" not in kubelet.plugins

        # Fixed: the next retry (back-off capped at 0.2 s) serves and registers it.
        await kubelet.wait_for_devices(resource, within=2.0)
        assert manager.failed_plugins() == {}
        assert any("works again" in r.getMessage() for r in caplog.records)
        assert len(events_for(sim, plugins.START_FAILED)) == 1


async def test_refused_registration_is_contained_and_retried_with_backoff(
    sockdir: Path,
    api: kubeapi.KubeApi,
    sim: simapiserver.SimApiserver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    named = named_devices("dev0", "dev1")
    first, second = sorted(named)
    refused = f"akri.sh/{second}"
    attempts: list[float] = []
    refusing = True

    def reject(resource: str) -> str | None:
        if resource == refused and refusing:
            attempts.append(time.monotonic())
            return "no room for more extended resources"
        return None

    async with manager_running(sockdir / "dp", api, reject) as (manager, kubelet):
        manager.set_devices(("default", CONFIG), named, {})
        for name in (first, second):
            manager.on_instance_event("ADDED", instance(name, f"uid-{name}"))
        await kubelet.wait_for_devices(f"akri.sh/{first}")
        await kubelet.wait_for_devices(f"akri.sh/{CONFIG}", lambda d: len(d) == 2)
        await eventually(lambda: len(attempts) >= 4)

        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        assert gaps[0] >= 0.09 and all(g >= 0.19 for g in gaps[2:]), gaps  # 0.1, 0.2, 0.2...
        assert len(warnings_about(caplog, "no room for more extended resources")) == 1
        await eventually(lambda: len(events_for(sim, plugins.REGISTRATION_FAILED)) == 1)
        (event,) = events_for(sim, plugins.REGISTRATION_FAILED)
        assert event["involvedObject"]["name"] == second
        assert "no room for more extended resources" in event["message"]

        refusing = False
        await kubelet.wait_for_devices(refused, within=2.0)
        # kubelet may list the devices before register() has returned to the manager, which
        # only then clears the failure.
        await eventually(lambda: manager.failed_plugins() == {}, within=2.0)


async def test_a_claim_recorded_while_plugins_stop_leaves_stopping_to_the_manager(
    sockdir: Path, api: kubeapi.KubeApi, sim: simapiserver.SimApiserver
) -> None:
    # Allocate records its claim through write_usage. It used to converge the plugins itself,
    # racing the manager's loop: both then stopped the same plugin, and the second pop of it
    # raised KeyError, which ended the manager (and with it the agent).
    for crd in CRDS:
        await cluster.kubectl(sim, "apply", "-f", str(crd))
    directory = sockdir / "dp"
    named = named_devices("dev0", "dev1", "dev2")
    kept, *going = sorted(named)
    body = instance(kept, "")
    # No owner: the simulator's garbage collector would delete an Instance of a missing owner.
    body["metadata"] = {"name": kept, "namespace": "default"}
    await api.create(resources.INSTANCES, "default", body)
    async with manager_running(directory, api) as (manager, kubelet):
        manager.set_devices(("default", CONFIG), named, {})
        for name in named:
            manager.on_instance_event("ADDED", instance(name, f"uid-{name}"))
        for name in named:
            await kubelet.wait_for_devices(f"akri.sh/{name}")

        # Hold the stops of the two plugins going away (as a slow file system would).
        gate, stopping = asyncio.Event(), asyncio.Event()
        for name in going:
            plugin = manager.instance_plugins[("default", name)]

            async def held_stop(stop: Callable[[], Awaitable[None]] = plugin.stop) -> None:
                stopping.set()
                await gate.wait()
                await stop()

            plugin.stop = held_stop  # type: ignore[method-assign]
        for name in going:
            manager.on_instance_event("DELETED", instance(name, f"uid-{name}"))
        await asyncio.wait_for(stopping.wait(), 10)

        # The manager is stopping the first of them; a claim recorded now joins none of it.
        claim = {f"{kept}-0": NODE}
        try:
            await asyncio.wait_for(manager.write_usage("default", kept, lambda _: claim), 10)
        finally:
            gate.set()
        await kubelet.wait_for(lambda: not {f"akri.sh/{n}" for n in going} & set(kubelet.plugins))
        await eventually(lambda: manager.held_slots().get(kept) == (naming.NodeUsage(NODE),))
        assert sorted(k[1] for k in manager.instance_plugins) == [kept]


# --- the whole agent -------------------------------------------------------------------------


def debug_echo_configuration(name: str, *descriptions: str) -> str:
    return json.dumps(
        {
            "apiVersion": naming.API_GROUP_VERSION,
            "kind": "Configuration",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "discoveryHandler": {
                    "name": "debugEcho",
                    "discoveryDetails": f"descriptions: [{', '.join(descriptions)}]",
                },
                "capacity": 1,
            },
        }
    )


async def test_agent_outlives_a_directory_too_long_for_any_socket(
    sim: simapiserver.SimApiserver, sockdir: Path
) -> None:
    for crd in CRDS:
        await cluster.kubectl(sim, "apply", "-f", str(crd))
    directory = sockdir / ("d" * (100 - len(os.fsencode(sockdir)) - 1))
    assert len(os.fsencode(directory)) == 100  # leaves 6 bytes: no socket name fits
    s = agent_settings.AgentSettings(
        node_name=NODE,
        kube=agent_settings.KubeSettings(
            kubeconfig=Path(sim.kubeconfig_path), user_agent="edgehub-agent/test"
        ),
        discovery_handlers_dir=sockdir / "akri",
        embedded_handlers=("debugEcho",),
        handler_environ={
            "DEBUG_ECHO_INSTANCES_SHARED": "true",
            "DEBUG_ECHO_AVAILABILITY_FILE": str(sockdir / "availability"),
            "DEBUG_ECHO_POLL_SECONDS": "0.05",
        },
        device_plugins_dir=directory,
        pod_resources_socket=None,
        cdi_dir=sockdir / "cdi",
        metrics_port=None,
        timings=dataclasses.replace(
            FAST, settle=0.3, registration_window=0.3, watch_backoff_initial=0.1
        ),
    )
    async with running.running(s) as agent:
        await cluster.kubectl(
            sim, "apply", "-f", "-", stdin=debug_echo_configuration("one", "foo0")
        )

        async def failure_event() -> bool:
            return bool(events_for(sim, plugins.START_FAILED))

        await cluster.eventually(failure_event)
        event = events_for(sim, plugins.START_FAILED)[0]
        assert event["involvedObject"]["kind"] in ("Instance", "Configuration")
        assert str(directory) in event["message"] and "too long" in event["message"]

        # The reconcile loop is alive: a second Configuration still gets its Instance.
        await cluster.kubectl(
            sim, "apply", "-f", "-", stdin=debug_echo_configuration("two", "bar0")
        )

        async def both_configurations() -> bool:
            listed = json.loads(await cluster.kubectl(sim, "get", "akrii", "-o", "json"))
            return {i["spec"]["configurationName"] for i in listed["items"]} == {"one", "two"}

        await cluster.eventually(both_configurations)
        assert agent.ready
        assert agent.plugins is not None
        assert all("too long" in m for m in agent.plugins.failed_plugins().values())
        assert len(agent.plugins.failed_plugins()) == 4  # two Instance, two Configuration


@pytest.mark.parametrize(
    ("usage", "why"),
    [
        ({"garbage": NODE}, "spec.deviceUsage key 'garbage'"),
        ({"{name}-\u0663": NODE}, "not a slot id"),  # Arabic-Indic 3: int() would take it
        ({"{name}-0": "C:only-two-parts"}, "not a deviceUsage value"),
    ],
)
async def test_a_malformed_instance_is_contained_and_reported(
    sockdir: Path,
    api: kubeapi.KubeApi,
    sim: simapiserver.SimApiserver,
    caplog: pytest.LogCaptureFixture,
    usage: dict[str, str],
    why: str,
) -> None:
    # Issue 14: the NamingError of one Instance's deviceUsage ended the manager, and with it
    # the agent. Now that Instance alone is out of service (its slots Unhealthy, an Event on
    # it, re-checked with back-off), every other Instance is served, and a fix heals it.
    caplog.set_level(logging.INFO, logger="discovery.agent.plugins")
    named = named_devices("dev0", "dev1")
    good, bad = sorted(named)
    async with manager_running(sockdir / "dp", api) as (manager, kubelet):
        manager.set_devices(("default", CONFIG), named, {})
        manager.on_instance_event("ADDED", instance(bad, "uid-bad"))
        broken = instance(bad, "uid-bad")
        broken["metadata"]["resourceVersion"] = "2"
        broken["spec"]["deviceUsage"] = {k.format(name=bad): v for k, v in usage.items()}
        await kubelet.wait_for_devices(f"akri.sh/{bad}", lambda d: d == {f"{bad}-0": "Healthy"})
        manager.on_instance_event("MODIFIED", broken)
        manager.on_instance_event("ADDED", instance(good, "uid-good"))

        await kubelet.wait_for_devices(f"akri.sh/{good}")
        # Nothing of the bad one can be handed out: its slot, and its Configuration vdev.
        await kubelet.wait_for_devices(f"akri.sh/{bad}", lambda d: d == {f"{bad}-0": "Unhealthy"})
        await kubelet.wait_for_devices(f"akri.sh/{CONFIG}", lambda d: len(d) == 1)
        await eventually(lambda: len(events_for(sim, plugins.INVALID_INSTANCE)) == 1)
        (event,) = events_for(sim, plugins.INVALID_INSTANCE)
        assert event["involvedObject"]["uid"] == "uid-bad" and why in event["message"]
        assert why in manager.failed_plugins()[f"akri.sh/{bad}"]
        await asyncio.sleep(0.5)  # several back-off rounds at the 0.2 s cap
        assert len(warnings_about(caplog, why)) == 1
        assert len(events_for(sim, plugins.INVALID_INSTANCE)) == 1
        assert bad not in manager.held_slots()

        fixed = instance(bad, "uid-bad")
        fixed["metadata"]["resourceVersion"] = "3"
        fixed["spec"]["deviceUsage"] = {f"{bad}-0": NODE}
        manager.on_instance_event("MODIFIED", fixed)
        await kubelet.wait_for_devices(f"akri.sh/{bad}", lambda d: d == {f"{bad}-0": "Healthy"})
        await kubelet.wait_for_devices(f"akri.sh/{CONFIG}", lambda d: len(d) == 1)
        assert manager.failed_plugins() == {}
        assert manager.held_slots()[bad] == (naming.NodeUsage(NODE),)


async def test_allocate_on_a_malformed_instance_says_why(
    sockdir: Path, api: kubeapi.KubeApi, sim: simapiserver.SimApiserver
) -> None:
    for crd in CRDS:
        await cluster.kubectl(sim, "apply", "-f", str(crd))
    named = named_devices("dev0")
    (name,) = named
    body = instance(name, "")
    body["metadata"] = {"name": name, "namespace": "default"}
    async with manager_running(sockdir / "dp", api) as (manager, kubelet):
        manager.set_devices(("default", CONFIG), named, {})
        manager.on_instance_event("ADDED", await api.create(resources.INSTANCES, "default", body))
        await kubelet.wait_for_devices(f"akri.sh/{name}")
        # Broken behind the reflector's back: the claim reads the stored object.
        stored = await api.get_or_none(resources.INSTANCES, "default", name)
        assert stored is not None
        stored["spec"]["deviceUsage"] = {"garbage": "node-b"}
        await api.replace(resources.INSTANCES, "default", name, stored)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await kubelet.allocate(f"akri.sh/{name}", [f"{name}-0"])
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "spec.deviceUsage key 'garbage'" in (caught.value.details() or "")


async def test_a_missing_kubelet_socket_is_said_once_and_plugins_register_when_it_comes(
    sockdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="discovery.agent.plugins")
    directory = sockdir / "dp"
    directory.mkdir()
    s = agent_settings.AgentSettings(node_name=NODE, device_plugins_dir=directory, timings=FAST)
    from kubernetes_asyncio import client as k8s_client

    offline = k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:9"))
    manager = plugins.Manager(s, kubeapi.KubeApi(offline, request_timeout=1.0), metrics.Metrics())
    named = named_devices("dev0")
    (name,) = named
    try:
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(manager.run(), name="plugins without kubelet")
            manager.set_devices(("default", CONFIG), named, {})
            manager.on_instance_event("ADDED", instance(name, "uid-0"))
            why = f"kubelet's device-plugin socket {directory / 'kubelet.sock'} is missing"
            await eventually(lambda: bool(warnings_about(caplog, why)))
            await asyncio.sleep(0.5)  # several kubelet polls: still one line
            (line,) = warnings_about(caplog, why)
            assert "device plugins wait for it" in line and "--device-plugins-dir" in line
            assert not manager.kubelet_socket_present
            async with sim_kubelet.SimKubelet(directory) as kubelet:
                await kubelet.wait_for_devices(f"akri.sh/{name}", within=5.0)
                assert manager.kubelet_socket_present
            task.cancel()
    finally:
        await offline.close()
