"""The broker controller and the node watcher of ``edgehub manager`` against the simulated
apiserver, with the manager's own ServiceAccount and Instances written as agents write them:
broker pods per node of each Instance (shape, node, recreated when deleted or changed, gone
with their node or Instance), Services, a stranger's pod left alone, pods that keep ending
backed off; nodes that leave taken out of Instances; only the leader acts."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from pathlib import Path
from typing import Any

from managers_support import (
    akri_settings,
    configuration,
    eventually,
    install_crds,
    instance,
    names,
    nodes_processed,
    service_account_dir,
)

from managers import running
from yurthub.testing import simapiserver

BROKER = {
    "containers": [
        {
            "name": "broker",
            "image": "nginx:stable",
            "resources": {"limits": {"{{PLACEHOLDER}}": "1"}},
        }
    ]
}
POD_LABEL = "akri.sh/configuration=cfg"
USER = "system:serviceaccount:kube-system:edgehub-manager"


def pods(sim: simapiserver.SimApiserver) -> dict[str, Any]:
    return names(sim, "pods", POD_LABEL)


def writes(sim: simapiserver.SimApiserver, verb: str, resource: str) -> list[str]:
    return [
        r.name
        for r in sim.audit_log()
        if r.user == USER and r.verb == verb and r.resource == resource and r.code < 300
    ]


def events(sim: simapiserver.SimApiserver, reason: str) -> list[dict[str, Any]]:
    return [e for e in sim.state.list("events", "default") if e.get("reason") == reason]


async def test_broker_pods_and_services_follow_instances(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    install_crds(sim)
    account = service_account_dir(sim, tmp_path / "sa")
    sim.state.create(
        configuration(
            capacity=2,
            brokerSpec={"brokerPodSpec": BROKER},
            instanceServiceSpec={"ports": [{"name": "grpc", "port": 8083}]},
            configurationServiceSpec={"ports": [{"name": "grpc", "port": 8083}]},
        )
    )
    async with running.running(akri_settings(sim, account)):
        instance(sim, "cfg-aaaaaa", ["edge-node-1", "edge-node-2"])  # shared on two nodes
        instance(sim, "cfg-bbbbbb", ["edge-node-1"], shared=False)
        want = {"edge-node-1-cfg-aaaaaa-pod", "edge-node-2-cfg-aaaaaa-pod", "cfg-bbbbbb-pod"}
        await eventually(lambda: set(pods(sim)) == want)
        await eventually(
            lambda: all(p["status"].get("phase") == "Running" for p in pods(sim).values())
        )
        found = pods(sim)
        for name, pod in found.items():
            labels = pod["metadata"]["labels"]
            # The (simulated) scheduler followed the node affinity to the broker's node.
            assert pod["spec"]["nodeName"] == labels["akri.sh/target-node"], name
            assert labels["app"] == name and labels["controller"] == "akri.sh"
            owner = pod["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"]) == ("Instance", labels["akri.sh/instance"])
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            assert limits == {f"akri.sh/{labels['akri.sh/instance']}": "1"}
        await eventually(
            lambda: (
                set(names(sim, "services", POD_LABEL))
                == {"cfg-aaaaaa-svc", "cfg-bbbbbb-svc", "cfg-svc"}
            )
        )
        service = names(sim, "services")["cfg-aaaaaa-svc"]
        assert service["spec"]["selector"] == {
            "controller": "akri.sh",
            "akri.sh/instance": "cfg-aaaaaa",
        }
        assert events(sim, "SuccessfulCreate")

        # A deleted broker pod comes back (a new uid).
        old_uid = found["edge-node-2-cfg-aaaaaa-pod"]["metadata"]["uid"]
        sim.state.delete("pods", "default", "edge-node-2-cfg-aaaaaa-pod")
        await eventually(
            lambda: (
                pods(sim).get("edge-node-2-cfg-aaaaaa-pod", {}).get("metadata", {}).get("uid")
                not in (None, old_uid)
            )
        )

        # A pod that is not ours holds the name of the next broker: left alone, reported.
        stranger = sim.state.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "cfg-cccccc-pod", "namespace": "default"},
                "spec": {"nodeName": "edge-node-2", "containers": [{"name": "x", "image": "x"}]},
            }
        )
        instance(sim, "cfg-cccccc", ["edge-node-2"], shared=False)
        await eventually(lambda: bool(events(sim, "NameTaken")))
        assert "cfg-cccccc-pod" in events(sim, "NameTaken")[0]["message"]
        kept = sim.state.get("pods", "default", "cfg-cccccc-pod")
        assert kept["metadata"]["uid"] == stranger["metadata"]["uid"]
        assert not kept["metadata"].get("ownerReferences")

        # A changed broker spec recreates every broker; a changed capacity does not.
        before = {n: p["metadata"]["uid"] for n, p in pods(sim).items() if n in want}
        config = sim.state.get("configurations.akri.sh", "default", "cfg")
        config["spec"]["capacity"] = 3
        sim.state.update(config)
        await asyncio.sleep(0.5)
        assert {n: p["metadata"]["uid"] for n, p in pods(sim).items() if n in want} == before
        config = sim.state.get("configurations.akri.sh", "default", "cfg")
        config["spec"]["brokerSpec"]["brokerPodSpec"]["containers"][0]["image"] = "nginx:next"
        sim.state.update(config)

        def recreated() -> bool:
            now = pods(sim)
            return all(
                n in now
                and now[n]["metadata"]["uid"] != uid
                and now[n]["spec"]["containers"][0]["image"] == "nginx:next"
                for n, uid in before.items()
            )

        await eventually(recreated)

        # A node leaves a shared Instance: its broker goes; the Instance goes: all its own go.
        shared = sim.state.get("instances.akri.sh", "default", "cfg-aaaaaa")
        shared["spec"]["nodes"] = ["edge-node-1"]
        sim.state.update(shared)
        await eventually(lambda: "edge-node-2-cfg-aaaaaa-pod" not in pods(sim))
        # An Instance being deleted (held by a finalizer, so the garbage collector has not
        # acted yet): the controller itself removes its broker and Service.
        local = sim.state.get("instances.akri.sh", "default", "cfg-bbbbbb")
        local["metadata"]["finalizers"] = ["test/hold"]
        sim.state.update(local)
        sim.state.delete("instances.akri.sh", "default", "cfg-bbbbbb")
        await eventually(lambda: "cfg-bbbbbb-pod" not in pods(sim))
        await eventually(lambda: "cfg-bbbbbb-svc" not in names(sim, "services"))
        assert "cfg-bbbbbb-pod" in writes(sim, "delete", "pods")
        assert "cfg-bbbbbb-svc" in writes(sim, "delete", "services")
        for name in ("cfg-aaaaaa", "cfg-cccccc"):
            sim.state.delete("instances.akri.sh", "default", name)
        await eventually(lambda: "cfg-svc" not in names(sim, "services"))
        await eventually(lambda: not pods(sim))
        assert sim.state.get("pods", "default", "cfg-cccccc-pod")  # the stranger stays


async def test_a_broker_that_keeps_ending_is_backed_off(
    tmp_path: Path,
) -> None:
    # No simulated kubelets: the test plays kubelet, ending each new pod at once.
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim", simulate_kubelets=False) as sim:
        install_crds(sim)
        account = service_account_dir(sim, tmp_path / "sa")
        sim.state.create(configuration(brokerSpec={"brokerPodSpec": BROKER}))
        async with running.running(akri_settings(sim, account)):
            instance(sim, "cfg-dddddd", ["edge-node-1"], shared=False)
            # The 4 s window opens at the first broker pod, not at the Instance: the manager's
            # start (watches, caches) on a loaded machine is no part of the back-off counted.
            await eventually(lambda: "cfg-dddddd-pod" in pods(sim), timeout=30.0)
            created: list[float] = []
            seen: set[str] = set()
            deadline = time.monotonic() + 4.0
            while time.monotonic() < deadline:
                pod = pods(sim).get("cfg-dddddd-pod")
                if pod is not None and pod["metadata"]["uid"] not in seen:
                    seen.add(pod["metadata"]["uid"])
                    created.append(time.monotonic())
                    pod["status"] = {"phase": "Failed", "reason": "UnexpectedAdmissionError"}
                    sim.state.update(pod)
                await asyncio.sleep(0.02)
            gaps = [b - a for a, b in itertools.pairwise(created)]
            # 0.3 s, 0.6 s, 1.2 s, 2 s (cap) between re-creations: 3 to 4 in 4 s, not 200.
            assert 3 <= len(created) <= 5, gaps
            assert all(later > earlier for earlier, later in itertools.pairwise(gaps)), gaps


async def test_nodes_that_leave_are_taken_out_of_instances(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    install_crds(sim)
    account = service_account_dir(sim, tmp_path / "sa")
    config = configuration()
    config["metadata"]["finalizers"] = ["edge-node-1", "edge-node-2"]
    sim.state.create(config)
    usage = {"cfg-aaaaaa-0": "edge-node-1", "cfg-aaaaaa-1": "C:cfg-0:edge-node-2"}
    instance(sim, "cfg-aaaaaa", ["edge-node-1", "edge-node-2"], capacity=3, usage=usage)
    instance(sim, "cfg-bbbbbb", ["edge-node-2"], shared=False)
    instance(sim, "cfg-eeeeee", ["cloud-node-1"])
    async with running.running(akri_settings(sim, account, controllers=("nodewatcher",))) as m:
        (watcher,) = m.controllers
        await eventually(lambda: nodes_processed(watcher, "edge-node-1", "edge-node-2"))
        assert set(names(sim, "instances.akri.sh")) == {"cfg-aaaaaa", "cfg-bbbbbb", "cfg-eeeeee"}
        node = sim.state.get("nodes", None, "edge-node-2")
        for condition in node["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition["status"] = "Unknown"
        sim.state.update(node)
        await eventually(lambda: "cfg-bbbbbb" not in names(sim, "instances.akri.sh"))
        shared = names(sim, "instances.akri.sh")["cfg-aaaaaa"]
        assert shared["spec"]["nodes"] == ["edge-node-1"]
        assert shared["spec"]["deviceUsage"] == {"cfg-aaaaaa-0": "edge-node-1"}
        assert any("edge-node-2" in e["message"] for e in events(sim, "NodeLeft"))
        # NotReady is not gone: its agent may come back and removes its own finalizer.
        finalizers = sim.state.get("configurations.akri.sh", "default", "cfg")["metadata"]
        assert finalizers["finalizers"] == ["edge-node-1", "edge-node-2"]

        # A deleted node: its Instances, and the finalizer no agent will remove any more.
        sim.state.delete("nodes", None, "edge-node-1")
        await eventually(lambda: "cfg-aaaaaa" not in names(sim, "instances.akri.sh"))
        await eventually(
            lambda: (
                sim.state.get("configurations.akri.sh", "default", "cfg")["metadata"].get(
                    "finalizers"
                )
                == ["edge-node-2"]
            )
        )
        # An Instance naming a node this manager never saw (a mistyped --node-name, or deleted
        # while nobody watched): left alone, as Akri does; its agent may be alive.
        instance(sim, "cfg-ffffff", ["cloud-node-1", "ghost-node"])
        ghost = ("", "ghost-node")
        await eventually(
            lambda: (
                ("default", "cfg-ffffff") in watcher.reflectors[1].store
                and watcher.queue.pending(ghost) is None
                and not watcher.queue.held(ghost)
            )
        )
        left = names(sim, "instances.akri.sh")["cfg-ffffff"]["spec"]["nodes"]
        assert left == ["cloud-node-1", "ghost-node"]
        assert names(sim, "instances.akri.sh")["cfg-eeeeee"]["spec"]["nodes"] == ["cloud-node-1"]


async def test_only_the_leader_acts(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    install_crds(sim)
    account = service_account_dir(sim, tmp_path / "sa")
    sim.state.create(configuration(brokerSpec={"brokerPodSpec": BROKER}))
    kubeconfigs = {
        who: sim.write_kubeconfig(tmp_path / f"{who}.kubeconfig", who, ("system:masters",))
        for who in ("manager-a", "manager-b")
    }

    def settings_of(who: str) -> Any:
        return akri_settings(sim, account, election=True, identity=who, kubeconfig=kubeconfigs[who])

    def creators() -> set[str]:
        return {
            r.user
            for r in sim.audit_log()
            if r.verb == "create" and r.resource == "pods" and r.code < 300
        }

    async with contextlib.AsyncExitStack() as stack:
        leader = contextlib.AsyncExitStack()
        try:
            first = await leader.enter_async_context(running.running(settings_of("manager-a")))
            await eventually(lambda: first.leading)
            second = await stack.enter_async_context(running.running(settings_of("manager-b")))
            instance(sim, "cfg-111111", ["edge-node-1"], shared=False)
            await eventually(lambda: "cfg-111111-pod" in pods(sim))
            await asyncio.sleep(0.3)
            assert creators() == {"manager-a"}
            assert not second.leading
        finally:
            # The leader stops and releases the Lease.
            await leader.aclose()
        await eventually(lambda: second.leading, timeout=10)
        instance(sim, "cfg-222222", ["edge-node-2"], shared=False)
        await eventually(lambda: "cfg-222222-pod" in pods(sim))
        assert creators() == {"manager-a", "manager-b"}
