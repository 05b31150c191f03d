"""The whole agent (in-process) against the simulated apiserver, kubectl and a simulated kubelet.

Covers reference §9 acceptance behaviour end to end: Instances with Akri's names, OFFLINE/ONLINE,
plugins registering, Allocate content and the RV-guarded claim, the reclaimer, Configuration
deletion, and the failure cases of the issue (late handler, missing ConfigMap, restart without
churn even with a slow first list or a late second endpoint, two nodes sharing a device, racing
Allocate, apiserver outage), and Instances adopted from Akri's agent with its node finalizer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import agent_support
import aiohttp
import grpc
import pytest

from discovery import devices, sdk
from discovery.agent import running, settings
from discovery.handlers import debug_echo
from discovery.testing import cluster
from discovery.testing import kubelet as sim_kubelet

pytestmark = pytest.mark.slow


def configuration(name: str, handler: str, details: str, capacity: int = 2, **extra: Any) -> str:
    body = {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "discoveryHandler": {"name": handler, "discoveryDetails": details, **extra},
            "capacity": capacity,
            "brokerProperties": {"FROM_CONFIG": "yes"},
        },
    }
    return json.dumps(body)


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Any]:
    async with agent_support.akri_sim(tmp_path) as server:
        yield server


@contextlib.asynccontextmanager
async def node(
    sim: Any, base: Path, name: str, kube: settings.KubeSettings | None = None, **kw: Any
) -> AsyncIterator[tuple[running.Agent, sim_kubelet.SimKubelet, sim_kubelet.SimPodResources]]:
    s = agent_support.agent_settings(sim, base, name, **kw)
    if kube is not None:
        s = dataclasses.replace(s, kube=kube)
    async with (
        sim_kubelet.SimKubelet(s.device_plugins_dir) as kubelet,
        sim_kubelet.SimPodResources(base / "pr.sock") as pods,
    ):
        agent = running.Agent(s)
        async with asyncio.timeout(15):
            await agent.start()
        try:
            yield agent, kubelet, pods
        finally:
            await agent.stop()


async def test_debug_echo_instances_plugins_allocate_reclaim_offline_delete(
    sim: Any, sockdir: Path
) -> None:
    availability = sockdir / "availability"
    async with node(sim, sockdir, "node-a") as (agent, kubelet, pods):
        await cluster.kubectl(
            sim,
            "apply",
            "-f",
            "-",
            stdin=configuration("cfg", "debugEcho", "descriptions: [foo0, foo1]"),
        )
        names = {f"cfg-{agent_support.digest('foo0')}", f"cfg-{agent_support.digest('foo1')}"}

        async def both() -> bool:
            return set(await cluster.instances(sim)) == names

        await cluster.eventually(both)
        found = await cluster.instances(sim)
        inst = found[f"cfg-{agent_support.digest('foo0')}"]
        assert inst["spec"]["nodes"] == ["node-a"]
        assert inst["spec"]["cdiName"] == f"akri.sh/cfg={agent_support.digest('foo0')}"
        assert inst["spec"]["brokerProperties"] == {
            "DEBUG_ECHO_DESCRIPTION": "foo0",
            "FROM_CONFIG": "yes",
        }
        assert inst["spec"]["capacity"] == 2 and inst["spec"]["shared"] is True
        assert inst["metadata"]["ownerReferences"][0]["kind"] == "Configuration"
        config = json.loads(await cluster.kubectl(sim, "get", "akric", "cfg", "-o", "json"))
        assert "node-a" in config["metadata"]["finalizers"]
        table = await cluster.kubectl(sim, "get", "akrii")
        assert "CONFIG" in table and "SHARED" in table and "NODES" in table

        # The CDI spec file holds both devices.
        cdi_file = sockdir / "cdi" / "akri.sh-cfg.json"
        spec = json.loads(cdi_file.read_text())
        assert spec["kind"] == "akri.sh/cfg"
        assert sorted(d["name"] for d in spec["devices"]) == sorted(
            [agent_support.digest("foo0"), agent_support.digest("foo1")]
        )
        assert spec["containerEdits"] == {"env": ["FROM_CONFIG=yes"]}

        count = 'akri_instance_count{configuration="default/cfg",is_shared="true"} 2.0'
        assert count in agent.metrics.render().decode()

        # kubelet sees an Instance plugin and the Configuration plugin.
        instance_name = f"cfg-{agent_support.digest('foo0')}"
        resource = f"akri.sh/{instance_name}"
        slots_seen = await kubelet.wait_for_devices(resource)
        assert slots_seen == {f"{instance_name}-0": "Healthy", f"{instance_name}-1": "Healthy"}
        await kubelet.wait_for_devices("akri.sh/cfg", lambda d: len(d) == 2)

        response = await kubelet.allocate(resource, [f"{instance_name}-0"])
        (container,) = response.container_responses
        suffix = agent_support.digest("foo0").upper()
        assert container.envs["DEBUG_ECHO_DESCRIPTION"] == "foo0"
        assert container.envs[f"DEBUG_ECHO_DESCRIPTION_{suffix}"] == "foo0"
        assert container.envs[f"FROM_CONFIG_{suffix}"] == "yes"
        assert [c.name for c in container.cdi_devices] == [
            f"akri.sh/cfg={agent_support.digest('foo0')}"
        ]
        usage = (await cluster.instances(sim))[instance_name]["spec"]["deviceUsage"]
        assert usage == {f"{instance_name}-0": "node-a"}
        await kubelet.wait_for_devices(resource, lambda d: d[f"{instance_name}-0"] == "Healthy")
        assert (
            f'akri_slot_usage{{instance="{instance_name}"}} 1.0' in agent.metrics.render().decode()
        )

        # Configuration-level allocation claims a slot as C:<vdev>:<node>.
        vdevs = await kubelet.wait_for_devices("akri.sh/cfg", lambda d: len(d) == 2)
        vdev = sorted(vdevs)[0]
        await kubelet.allocate("akri.sh/cfg", [vdev])

        async def config_claim() -> bool:
            values = [
                v
                for i in (await cluster.instances(sim)).values()
                for v in i["spec"]["deviceUsage"].values()
            ]
            return f"C:{vdev}:node-a" in values

        await cluster.eventually(config_claim)

        # kubelet (pod-resources) reports only the Instance-level slot: the vdev claim is freed.
        pods.set_in_use({resource: [f"{instance_name}-0"]})

        async def vdev_freed() -> bool:
            values = [
                v
                for i in (await cluster.instances(sim)).values()
                for v in i["spec"]["deviceUsage"].values()
            ]
            return f"C:{vdev}:node-a" not in values and "node-a" in values

        await cluster.eventually(vdev_freed)
        # Then nothing is in use: the Instance-level slot is freed as well (un-prefixed ids).
        pods.set_in_use({})

        async def all_free() -> bool:
            return all(
                not i["spec"]["deviceUsage"] for i in (await cluster.instances(sim)).values()
            )

        await cluster.eventually(all_free)

        # OFFLINE removes the Instances and their plugins; ONLINE brings them back.
        availability.write_text("OFFLINE")

        async def none() -> bool:
            return not await cluster.instances(sim)

        await cluster.eventually(none)
        await kubelet.wait_for(lambda: not kubelet.plugins)
        assert not cdi_file.exists()
        availability.write_text("ONLINE")
        await cluster.eventually(both)
        await kubelet.wait_for_devices(resource)

        # Deleting the Configuration removes everything, finalizer included.
        await cluster.kubectl(sim, "delete", "akric", "cfg", "--wait=false")

        async def config_gone() -> bool:
            out = await cluster.kubectl(sim, "get", "akric", "-A", "-o", "json")
            return not json.loads(out)["items"] and not await cluster.instances(sim)

        await cluster.eventually(config_gone)
        await kubelet.wait_for(lambda: not kubelet.plugins)
        assert not cdi_file.exists()
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{agent.metrics_port}/metrics") as response,
        ):
            metrics_text = await response.text()
            assert response.status == 200
            for probe in ("/healthz", "/readyz"):
                async with session.get(f"http://127.0.0.1:{agent.metrics_port}{probe}") as r:
                    assert r.status == 200, probe
        # Akri's names: a counter without _total, labelled by the handler; no _created.
        assert "# TYPE akri_discovery_response_result counter\n" in metrics_text
        assert (
            'akri_discovery_response_result{discovery_handler_name="debugEcho",result="Success"}'
            in metrics_text
        )
        assert 'akri_discovery_response_time_count{configuration="default/cfg"}' in metrics_text
        assert "_created" not in metrics_text


async def test_restart_keeps_instances_untouched(sim: Any, sockdir: Path) -> None:
    await cluster.kubectl(
        sim, "apply", "-f", "-", stdin=configuration("cfg", "debugEcho", "descriptions: [a, b]")
    )
    async with node(sim, sockdir, "node-a"):

        async def two() -> bool:
            return len(await cluster.instances(sim)) == 2

        await cluster.eventually(two)
        before = {
            n: (i["metadata"]["uid"], i["metadata"]["resourceVersion"])
            for n, i in (await cluster.instances(sim)).items()
        }
    # Agent down, then up again: no Instance is deleted or rewritten.
    async with node(sim, sockdir, "node-a") as (_, kubelet, _):
        await kubelet.wait_for(lambda: len(kubelet.plugins) == 3)
        await asyncio.sleep(1.0)
        after = {
            n: (i["metadata"]["uid"], i["metadata"]["resourceVersion"])
            for n, i in (await cluster.instances(sim)).items()
        }
        assert after == before


async def test_late_handler_and_missing_configmap(sim: Any, sockdir: Path) -> None:
    prop = [{"name": "P", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "k"}}}]
    await cluster.kubectl(
        sim,
        "apply",
        "-f",
        "-",
        stdin=configuration("cfg", "debugEcho", "descriptions: [x]", discoveryProperties=prop),
    )
    async with node(sim, sockdir, "node-a", embedded=False):
        # No handler registered and the ConfigMap is missing: nothing yet, an Event says why.
        await asyncio.sleep(0.5)
        assert await cluster.instances(sim) == {}

        async def warned() -> bool:
            return "later" in await cluster.kubectl(
                sim, "get", "events", "-n", "default", check=False
            )

        await cluster.eventually(warned)
        await cluster.kubectl(
            sim, "create", "configmap", "later", "--from-literal=k=v", "-n", "default"
        )
        handler = debug_echo.create(
            sdk.HandlerOptions(
                environ={"DEBUG_ECHO_AVAILABILITY_FILE": str(sockdir / "avail")}, interval=0.05
            )
        )
        serve_settings = sdk.ServeSettings(directory=sockdir / "akri", registration_retry=0.1)
        async with asyncio.TaskGroup() as tg:
            serving = tg.create_task(sdk.serve(handler, serve_settings), name="late handler")

            async def one() -> bool:
                return list(await cluster.instances(sim)) == [f"cfg-{agent_support.digest('x')}"]

            await cluster.eventually(one, within=15.0)
            serving.cancel()


async def test_two_nodes_share_one_instance_and_race_for_a_slot(sim: Any, sockdir: Path) -> None:
    a_avail, b_avail = sockdir / "a-avail", sockdir / "b-avail"
    await cluster.kubectl(
        sim,
        "apply",
        "-f",
        "-",
        stdin=configuration("cfg", "debugEcho", "descriptions: [shared]", capacity=1),
    )
    name = f"cfg-{agent_support.digest('shared')}"
    async with (
        node(sim, sockdir / "a", "node-a", availability=a_avail) as (_, kubelet_a, _),
        node(sim, sockdir / "b", "node-b", availability=b_avail) as (_, kubelet_b, _),
    ):

        async def both_nodes() -> bool:
            found = await cluster.instances(sim)
            return name in found and sorted(found[name]["spec"]["nodes"]) == ["node-a", "node-b"]

        await cluster.eventually(both_nodes)
        resource = f"akri.sh/{name}"
        await kubelet_a.wait_for_devices(resource)
        await kubelet_b.wait_for_devices(resource)
        results = await asyncio.gather(
            kubelet_a.allocate(resource, [f"{name}-0"]),
            kubelet_b.allocate(resource, [f"{name}-0"]),
            return_exceptions=True,
        )
        failures = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(failures) == 1, results
        assert failures[0].code() == grpc.StatusCode.FAILED_PRECONDITION
        winner = "node-a" if not isinstance(results[0], BaseException) else "node-b"
        usage = (await cluster.instances(sim))[name]["spec"]["deviceUsage"]
        assert usage == {f"{name}-0": winner}

        # node-b loses the device: it leaves, node-a stays.
        b_avail.write_text("OFFLINE")

        async def only_a() -> bool:
            found = await cluster.instances(sim)
            return name in found and found[name]["spec"]["nodes"] == ["node-a"]

        await cluster.eventually(only_a)


async def test_apiserver_outage_is_survived(sim: Any, sockdir: Path) -> None:
    availability = sockdir / "availability"
    await cluster.kubectl(
        sim, "apply", "-f", "-", stdin=configuration("cfg", "debugEcho", "descriptions: [o]")
    )
    async with node(sim, sockdir, "node-a") as (agent, _, _):

        async def one() -> bool:
            return len(await cluster.instances(sim)) == 1

        await cluster.eventually(one)
        await sim.stop()
        availability.write_text("OFFLINE")
        await asyncio.sleep(1.5)
        assert agent.ready
        await sim.start()

        async def none() -> bool:
            return not await cluster.instances(sim)

        await cluster.eventually(none, within=15.0)


class Scripted:
    """A shared handler named ``scripted`` whose list the test sets; the first list of every
    stream comes ``delay`` seconds late (a slow first discovery pass)."""

    name = "scripted"
    shared = True

    def __init__(self, ids: list[str], delay: float = 0.0) -> None:
        self.ids = ids
        self.delay = delay

    def parse_details(self, text: str) -> str:
        return text

    async def discover(
        self, details: str, properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        await asyncio.sleep(self.delay)
        while True:
            yield [devices.Device(i) for i in self.ids]
            await asyncio.sleep(3600)


def serve_scripted(
    tg: asyncio.TaskGroup, handler: Scripted, base: Path, socket: str
) -> asyncio.Task[None]:
    serve_settings = sdk.ServeSettings(
        directory=base / "akri", socket_path=base / "akri" / socket, registration_retry=0.1
    )
    return tg.create_task(sdk.serve(handler, serve_settings), name=f"scripted on {socket}")


async def versions(sim: Any) -> dict[str, tuple[str, str]]:
    return {
        n: (i["metadata"]["uid"], i["metadata"]["resourceVersion"])
        for n, i in (await cluster.instances(sim)).items()
    }


async def test_restart_waits_for_a_slow_first_list_then_trusts_it_at_once(
    sim: Any, sockdir: Path
) -> None:
    await cluster.kubectl(sim, "apply", "-f", "-", stdin=configuration("cfg", "scripted", ""))
    handler = Scripted(["kept", "vanished"])
    async with asyncio.TaskGroup() as tg:
        serving = serve_scripted(tg, handler, sockdir, "scripted.sock")
        # settle is long: only the handler's report may make the agent remove anything.
        async with node(sim, sockdir, "node-a", embedded=False, settle=30.0):

            async def two() -> bool:
                return len(await cluster.instances(sim)) == 2

            await cluster.eventually(two)
            before = await versions(sim)
        # While the agent is down, one device goes; the next first pass takes 1.5 s.
        handler.ids, handler.delay = ["kept"], 1.5
        async with node(sim, sockdir, "node-a", embedded=False, settle=30.0):
            # Re-registered and streaming, silent for longer than the registration window
            # and the old 0.3 s settle: nothing may be removed yet.
            await asyncio.sleep(0.8)
            assert await versions(sim) == before
            kept = f"cfg-{agent_support.digest('kept')}"

            async def only_kept() -> bool:
                return set(await cluster.instances(sim)) == {kept}

            # The report is believed at once, long before the 30 s settle.
            await cluster.eventually(only_kept, within=5.0)
            assert (await versions(sim))[kept] == before[kept]
        serving.cancel()


async def test_late_second_endpoint_keeps_its_instances_within_the_registration_window(
    sim: Any, sockdir: Path
) -> None:
    await cluster.kubectl(sim, "apply", "-f", "-", stdin=configuration("cfg", "scripted", ""))
    first, second = Scripted(["from-a"]), Scripted(["from-b"])
    window: dict[str, Any] = {"settle": 30.0, "registration_window": 2.5}
    async with asyncio.TaskGroup() as tg:
        serving_a = serve_scripted(tg, first, sockdir, "a.sock")
        serving_b = serve_scripted(tg, second, sockdir, "b.sock")
        async with node(sim, sockdir, "node-a", embedded=False, **window):

            async def both() -> bool:
                return len(await cluster.instances(sim)) == 2

            await cluster.eventually(both)
            before = await versions(sim)
        serving_b.cancel()
        await asyncio.wait([serving_b])
        async with node(sim, sockdir, "node-a", embedded=False, **window):
            # Only endpoint a is back and has reported; b re-registers later, inside the
            # window: its Instance must survive (without the window it would be removed).
            await asyncio.sleep(1.0)
            assert await versions(sim) == before
            serving_b = serve_scripted(tg, second, sockdir, "b.sock")
            await asyncio.sleep(2.5)  # past the window, both endpoints reported
            assert await versions(sim) == before
        serving_a.cancel()
        serving_b.cancel()


async def test_service_account_credentials_follow_token_rotation(sim: Any, sockdir: Path) -> None:
    await cluster.kubectl(sim, "create", "serviceaccount", "edgehub-agent", "-n", "default")
    account = sockdir / "serviceaccount"
    account.mkdir()
    (account / "ca.crt").write_bytes(sim.ca_pem)
    # kubelet-style rotation: the first token expires soon, its successor replaces the file.
    # It must outlive the agent's start, which syncs with it (5 to 6 s: issue() truncates to
    # whole seconds); with 1 to 2 s a slow start met a 401 and never synced.
    first = sim.service_account_token("default", "edgehub-agent", expiration_seconds=6)
    claims = sim.state.tokens.verify(first)
    assert claims is not None
    first_expiry = float(claims["exp"])
    (account / "token").write_text(first)
    kube = settings.KubeSettings(
        service_account=settings.ServiceAccount(
            directory=account, server=sim.url, token_reload=0.2
        ),
        user_agent="edgehub-agent/test",
    )
    async with node(sim, sockdir, "node-a", kube=kube):
        (account / "token").write_text(sim.service_account_token("default", "edgehub-agent"))
        # Wait for the first token's expiry itself: from then on only the successor the agent
        # re-read from the file can create the Instance below.
        await asyncio.sleep(max(0.0, first_expiry - time.time()) + 0.2)
        assert sim.state.tokens.verify(first) is None, "the first token has expired"
        await cluster.kubectl(
            sim, "apply", "-f", "-", stdin=configuration("cfg", "debugEcho", "descriptions: [sa]")
        )

        async def created() -> bool:
            return list(await cluster.instances(sim)) == [f"cfg-{agent_support.digest('sa')}"]

        await cluster.eventually(created)


@dataclasses.dataclass(frozen=True)
class Echoing:
    """A local handler that, like some third-party ones, copies a discovery property (here a
    camera password resolved from a Secret) into its device's properties."""

    name: str = "echoing"
    shared: bool = False

    def parse_details(self, text: str) -> str:
        return text

    async def discover(
        self, details: str, properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        password = properties["password"].decode()
        yield [
            devices.Device(
                "cam", {"CAMERA_URL": f"rtsp://admin:{password}@10.1.2.3/", "MODEL": "x"}
            )
        ]
        await asyncio.Event().wait()
        yield []


async def test_cdi_files_carry_no_secret_values(sim: Any, sockdir: Path) -> None:
    # Issue 14: CDI specs are world-readable (0644); a broker property carrying a value
    # resolved from a Secret must reach the container through Allocate only.
    secret = "s3cr3t-pa55"
    await cluster.kubectl(
        sim, "create", "secret", "generic", "cam", f"--from-literal=pw={secret}", "-n", "default"
    )
    prop = [{"name": "password", "valueFrom": {"secretKeyRef": {"name": "cam", "key": "pw"}}}]
    await cluster.kubectl(
        sim,
        "apply",
        "-f",
        "-",
        stdin=configuration("cams", "echoing", "", discoveryProperties=prop),
    )
    async with node(sim, sockdir, "node-a", embedded=False) as (agent, kubelet, _):
        assert agent.registry is not None
        agent.registry.register_embedded(Echoing())
        (name,) = await _instances_eventually(sim, 1)
        cdi_file = sockdir / "cdi" / "akri.sh-cams.json"

        async def written() -> bool:
            return cdi_file.exists()

        await cluster.eventually(written)
        text = cdi_file.read_text()
        assert secret not in text and "MODEL=x" in text and "FROM_CONFIG=yes" in text
        assert cdi_file.stat().st_mode & 0o777 == 0o644
        resource = f"akri.sh/{name}"
        await kubelet.wait_for_devices(resource)
        response = await kubelet.allocate(resource, [f"{name}-0"])
        (container,) = response.container_responses
        assert container.envs["CAMERA_URL"] == f"rtsp://admin:{secret}@10.1.2.3/"


async def test_debug_echo_details_are_read_as_akri_reads_them(sim: Any, sockdir: Path) -> None:
    # serde_yaml takes each scalar of a string list as its text, and ignores unknown keys.
    texts = ["1", "yes", "0x1F", "1.50", "~"]
    details_text = "descriptions: [1, yes, 0x1F, 1.50, ~]\nnotAField: &x [1]\nalso: *x"
    async with node(sim, sockdir, "node-a"):
        await cluster.kubectl(
            sim, "apply", "-f", "-", stdin=configuration("cfg", "debugEcho", details_text)
        )
        names = await _instances_eventually(sim, len(texts))
        found = await cluster.instances(sim)
        assert {
            n: found[n]["spec"]["brokerProperties"]["DEBUG_ECHO_DESCRIPTION"] for n in names
        } == {f"cfg-{agent_support.digest(t)}": t for t in texts}


# -- Instances adopted from Akri's agent: its node finalizer (reference §5.3) never leaves one
# stuck Terminating. A node migrated from Akri's agent keeps the Instances it wrote; they are
# written here exactly as Akri's agent leaves them, before edgehub's agent starts.

AKRI_NODE = "node-a"
ADOPTED = f"cfg-{agent_support.digest('foo0')}"


async def akri_instance(server: Any) -> dict[str, Any]:
    """The Instance Akri's agent on ``AKRI_NODE`` created for debugEcho device ``foo0``."""
    config = json.loads(await cluster.kubectl(server, "get", "akric", "cfg", "-o", "json"))
    body = {
        "apiVersion": "akri.sh/v0",
        "kind": "Instance",
        "metadata": {
            "name": ADOPTED,
            "namespace": "default",
            "finalizers": [AKRI_NODE],
            "ownerReferences": [
                {
                    "apiVersion": "akri.sh/v0",
                    "kind": "Configuration",
                    "name": "cfg",
                    "uid": config["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "configurationName": "cfg",
            "cdiName": f"akri.sh/cfg={agent_support.digest('foo0')}",
            "capacity": 2,
            "brokerProperties": {"DEBUG_ECHO_DESCRIPTION": "foo0", "FROM_CONFIG": "yes"},
            "shared": True,
            "nodes": [AKRI_NODE],
            "deviceUsage": {},
        },
    }
    await cluster.kubectl(server, "create", "-f", "-", stdin=json.dumps(body))
    return (await cluster.instances(server))[ADOPTED]


async def test_adopted_instance_goes_when_offline_and_comes_back_with_its_plugin(
    sim: Any, sockdir: Path
) -> None:
    availability = sockdir / "availability"
    await cluster.kubectl(
        sim, "apply", "-f", "-", stdin=configuration("cfg", "debugEcho", "descriptions: [foo0]")
    )
    adopted = await akri_instance(sim)
    resource = f"akri.sh/{ADOPTED}"
    async with node(sim, sockdir, AKRI_NODE, availability=availability) as (_, kubelet, _):
        await kubelet.wait_for_devices(resource)
        assert (await cluster.instances(sim))[ADOPTED]["metadata"]["uid"] == adopted["metadata"][
            "uid"
        ]

        availability.write_text("OFFLINE")

        async def gone() -> bool:
            # Not merely Terminating: gone.
            return ADOPTED not in await cluster.instances(sim)

        await cluster.eventually(gone)
        await kubelet.wait_for(lambda: resource not in kubelet.plugins)

        availability.write_text("ONLINE")

        async def back() -> bool:
            found = (await cluster.instances(sim)).get(ADOPTED)
            return found is not None and not found["metadata"].get("deletionTimestamp")

        await cluster.eventually(back)
        await kubelet.wait_for_devices(resource)
        again = (await cluster.instances(sim))[ADOPTED]
        assert again["spec"]["nodes"] == [AKRI_NODE]
        # edgehub's agent keeps the node finalizer as Akri's does, so mixed clusters agree.
        assert again["metadata"]["finalizers"] == [AKRI_NODE]


async def test_instance_found_terminating_while_its_device_is_there_is_recreated(
    sim: Any, sockdir: Path
) -> None:
    await cluster.kubectl(
        sim, "apply", "-f", "-", stdin=configuration("cfg", "debugEcho", "descriptions: [foo0]")
    )
    adopted = await akri_instance(sim)
    # Deleted while Akri's agent was gone: Terminating, waiting on the node's finalizer.
    await cluster.kubectl(sim, "delete", "akrii", ADOPTED, "--wait=false")
    stuck = (await cluster.instances(sim))[ADOPTED]
    assert stuck["metadata"].get("deletionTimestamp")
    resource = f"akri.sh/{ADOPTED}"
    async with node(sim, sockdir, AKRI_NODE) as (_, kubelet, _):

        async def recreated() -> bool:
            found = (await cluster.instances(sim)).get(ADOPTED)
            return (
                found is not None
                and found["metadata"]["uid"] != adopted["metadata"]["uid"]
                and not found["metadata"].get("deletionTimestamp")
            )

        await cluster.eventually(recreated)
        await kubelet.wait_for_devices(resource)


async def _instances_eventually(sim: Any, count: int) -> list[str]:
    async def enough() -> bool:
        return len(await cluster.instances(sim)) == count

    await cluster.eventually(enough, within=15.0)
    return sorted(await cluster.instances(sim))
