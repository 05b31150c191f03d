"""A YurtStaticSet rollout that goes wrong, driven by the yurtstaticset controller against the
simulated apiserver, and the operator's side through the installed ``edgehub rollout``
command (a process, as an operator runs it):

* a failed worker halts the whole YurtStaticSet: the annotations (the halt, and the worker's
  uid), the ``Halted`` condition, a Warning Event, the worker kept, no other node started;
  ``rollout status`` says so and its totals are the YurtStaticSet's status (what ``kubectl
  get yss`` prints);
* ``rollout resume`` deletes the recorded worker and the node is tried again;
* a node whose kubelet is not seen back after its worker succeeded halts it too;
* changing the template lifts a halt of the old one; ``rollout undo --pool`` writes the
  previous template back (``history`` lists both) and it is rolled out the same way;
* ``rollout pause`` starts nobody until resumed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from managers_support import eventually, service_account_dir
from staticsets_support import (
    CRD,
    LATEST,
    NS,
    TEMPLATE,
    end_worker,
    finish,
    mirror,
    node,
    renew,
    status,
    workers,
    yss,
    yss_settings,
)

from managers import running, staticsethalts, staticsetplanning
from yurthub.testing import simapiserver

EDGEHUB = str(Path(sys.executable).with_name("edgehub"))
POOL = "pool-a"
V3 = {**TEMPLATE, "spec": {"containers": [{"name": "hub", "image": "ghcr.io/edgehub/edgehub:3"}]}}
H3 = staticsetplanning.template_hash(V3)


async def rollout(sim: simapiserver.SimApiserver, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [EDGEHUB, "rollout", *args, "--kubeconfig", str(sim.kubeconfig_path)]
    # In a thread: the simulated apiserver answers on this test's event loop.
    return await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=60, check=False
    )


async def rows(sim: simapiserver.SimApiserver) -> dict[str, Any]:
    done = await rollout(sim, "status", "-o", "json", "--pool", POOL)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["items"]
    assert isinstance(row, dict)
    return row


def halt_of(sim: simapiserver.SimApiserver) -> staticsethalts.Halt | None:
    obj = sim.state.get("yurtstaticsets", NS, "hub")
    return staticsethalts.read(obj["metadata"].get("annotations"))


def halted_condition(sim: simapiserver.SimApiserver) -> dict[str, Any] | None:
    for c in status(sim).get("conditions") or []:
        if c["type"] == "Halted":
            assert isinstance(c, dict)
            return c
    return None


def events(sim: simapiserver.SimApiserver, reason: str) -> list[str]:
    return [e["message"] for e in sim.state.list("events", NS) if e.get("reason") == reason]


async def test_a_halted_rollout_waits_for_the_operator(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    sim.state.create(yaml.safe_load(CRD.read_text()))
    for n in ("a", "b", "c"):
        sim.state.create(node(n, pool=POOL))
        mirror(sim, n, "old")
        renew(sim, n, offset=-30)
    sim.state.create(yss(labels={"apps.openyurt.io/nodepool": POOL}))
    account = service_account_dir(sim, tmp_path / "sa")
    async with running.running(yss_settings(sim, account, node_ready_timeout=2.0)):
        await eventually(lambda: list(workers(sim)) == ["a"])
        first = workers(sim)["a"]["metadata"]["uid"]

        # a's worker fails: the whole YurtStaticSet halts, b and c are not started.
        end_worker(sim, "a", "Failed", "error: kube-system/hub-a: not ready within 120 s")
        await eventually(lambda: halt_of(sim) is not None)
        halt = halt_of(sim)
        assert halt is not None and (halt.hash, halt.node, halt.reason) == (
            LATEST,
            "a",
            "WorkerFailed",
        )
        assert halt.message == "error: kube-system/hub-a: not ready within 120 s"
        await eventually(lambda: halted_condition(sim) is not None)
        condition = halted_condition(sim)
        assert condition is not None and condition["status"] == "True"
        assert condition["reason"] == "WorkerFailed" and "node a" in condition["message"]
        recorded = sim.state.get("yurtstaticsets", NS, "hub")["metadata"]["annotations"]
        assert staticsethalts.halted_by(recorded) == {first}  # written with the halt
        assert any("no node is started until resumed" in m for m in events(sim, "RolloutHalted"))
        assert list(workers(sim)) == ["a"] and workers(sim)["a"]["metadata"]["uid"] == first
        row = await rows(sim)
        yss_status = status(sim)
        assert (row["total"], row["ready"], row["upgraded"]) == (
            yss_status["totalNumber"],
            yss_status["readyNumber"],
            yss_status["upgradedNumber"],
        )
        assert (row["total"], row["failed"], row["pending"], row["offline"]) == (3, 1, 2, 0)
        assert row["state"].startswith("Halted (WorkerFailed): node a: error:")
        assert row["nodes"] == {"a": "failed", "b": "pending", "c": "pending"}
        table = await rollout(sim, "status")
        assert table.returncode == 0 and "Halted (WorkerFailed)" in table.stdout, table

        # The operator resumes: the recorded worker goes, a is tried again.
        done = await rollout(sim, "resume", "--pool", POOL)
        assert done.returncode == 0 and "kube-system/hub: resumed" in done.stdout, done
        await eventually(
            lambda: "a" in workers(sim) and workers(sim)["a"]["metadata"]["uid"] != first
        )
        assert halt_of(sim) is None and list(workers(sim)) == ["a"]
        await eventually(lambda: (halted_condition(sim) or {}).get("status") == "False")
        assert events(sim, "RolloutResumed")

        # This time the swap works but a's kubelet never renews its Lease: halted again.
        mirror(sim, "a", LATEST)
        end_worker(sim, "a", "Succeeded")
        await eventually(lambda: halt_of(sim) is not None, timeout=30)
        halt = halt_of(sim)
        assert halt is not None and halt.reason == "NodeNotReady" and halt.node == "a"
        assert "Lease was not renewed" in halt.message
        assert list(workers(sim)) == ["a"]  # kept and recorded, nothing new
        await eventually(
            lambda: (
                staticsethalts.halted_by(
                    sim.state.get("yurtstaticsets", NS, "hub")["metadata"]["annotations"]
                )
                == {workers(sim)["a"]["metadata"]["uid"]}
            )
        )
        row = await rows(sim)
        assert (row["upgraded"], row["failed"], row["nodes"]["a"]) == (1, 1, "failed")

        # A new template (the fix): the old halt no longer applies, the rollout goes on.
        obj = sim.state.get("yurtstaticsets", NS, "hub")
        obj["spec"]["template"] = V3
        sim.state.update(obj)
        await eventually(lambda: halt_of(sim) is None)
        await eventually(
            lambda: [w["metadata"]["annotations"][staticsetplanning.HASH_ANNOTATION]
                     for w in workers(sim).values()] == [H3]
        )  # fmt: skip
        assert any("halt of an earlier template" in m for m in events(sim, "RolloutResumed"))

        # Undo by pool: the previous template is written back, revisions renumbered.
        done = await rollout(sim, "undo", "--pool", POOL)
        assert done.returncode == 0, done.stderr
        assert "kube-system/hub: rolling back to revision 1" in done.stdout
        got = sim.state.get("yurtstaticsets", NS, "hub")["spec"]["template"]
        assert staticsetplanning.template_hash(got) == LATEST

        def revisions() -> dict[str, int]:
            return {
                r["metadata"]["labels"]["edgehub.io/static-pod-hash"]: r["revision"]
                for r in sim.state.list("controllerrevisions", NS)
            }

        await eventually(lambda: revisions() == {LATEST: 3, H3: 2})
        listed = await rollout(sim, "history", "hub", "-n", NS)
        assert listed.returncode == 0, listed.stderr
        lines = [line.split() for line in listed.stdout.splitlines()[2:]]
        assert [(w[0], w[1]) for w in lines] == [("2", H3), ("3", LATEST)]
        assert lines[1][2] == "*"
        # a runs that template already (its V3 worker is gone with the undo): b is next.
        await eventually(lambda: list(workers(sim)) == ["b"])
        finish(sim, "b")
        await eventually(lambda: "c" in workers(sim))

        # Paused by the operator: nobody new starts.
        done = await rollout(sim, "pause", "hub", "-n", NS, "--reason", "maintenance")
        assert done.returncode == 0 and "paused" in done.stdout, done
        await eventually(lambda: (halted_condition(sim) or {}).get("reason") == "Paused")
        finish(sim, "c")
        await eventually(lambda: status(sim).get("upgradedNumber") == 3)
        row = await rows(sim)
        assert row["state"] == "Halted (Paused): maintenance", row
        refused = await rollout(sim, "undo", "--pool", POOL, "--to-revision", "3")
        assert refused.returncode == 1
        assert "revision 3 is the current template already" in refused.stderr
        done = await rollout(sim, "resume", "hub")
        assert done.returncode == 0 and "was halted: Paused" in done.stdout, done
        await eventually(lambda: workers(sim) == {})
        row = await rows(sim)
        assert row["state"] == "Complete" and row["upgraded"] == 3, row


async def test_naming_mistakes_are_one_line(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    sim.state.create(yaml.safe_load(CRD.read_text()))
    for args, words, code in (
        (("undo", "--pool", "nowhere"), "no YurtStaticSet labelled apps.openyurt.io/nodepool", 1),
        (("resume", "missing", "-n", NS), "no YurtStaticSet kube-system/missing", 1),
        (("resume",), "name a YurtStaticSet or give --pool", 1),
    ):
        done = await rollout(sim, *args)
        assert done.returncode == code, done
        assert done.stderr.startswith("error: ") and words in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    empty = await rollout(sim, "status")
    assert empty.returncode == 0 and empty.stdout.strip() == "No YurtStaticSets found."
