"""The agent's ClusterRole allows every request the agent really makes.

The simulated apiserver has no RBAC (every authenticated user may do everything), so the
check runs on our side: the real agent runs a Configuration's whole life against the
simulator on two nodes (properties from a ConfigMap that appears late and a Secret, shared
Instances created and joined, the Configuration deleted) while every request it sends is
recorded on its way out of ``kubeapi.KubeApi``. Each request, as an RBAC (verb, group,
resource), must be allowed by ``manifests/discovery/agent-rbac.yaml``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import csr_support as cs
import pytest
import rbac_support as checking
from manifests_support import MANIFESTS, one

from discovery.agent import running, settings
from discovery.testing import cluster
from kubecontrol import credentials, kubeapi
from managers import running as manager_running
from managers import settings as manager_settings
from yurthub.testing import simapiserver

Request = tuple[str, str, str]  # (verb, group, resource)


def rbac_request(method: str, path: str, watch: bool) -> Request:
    """``GET /apis/akri.sh/v0/namespaces/ns/instances/x`` -> ("get", "akri.sh", "instances")."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    verb = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete",
        "GET": "watch" if watch else ("get" if named else "list"),
    }[method]
    return verb, group, resource


def allowed(rules: list[Mapping[str, Any]], request: Request) -> bool:
    verb, group, resource = request
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in rules
    )


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> set[Request]:
    """Requests the agent's KubeApi sends (they still go to the server unchanged)."""
    seen: set[Request] = set()
    call, watch = kubeapi.KubeApi._call, kubeapi.KubeApi.watch

    async def recording_call(self: kubeapi.KubeApi, method: str, path: str, **kw: Any) -> Any:
        seen.add(rbac_request(method, path, watch=False))
        return await call(self, method, path, **kw)

    def recording_watch(
        self: kubeapi.KubeApi, resource: kubeapi.Resource, *a: Any, **kw: Any
    ) -> Any:
        seen.add(rbac_request("GET", resource.path(kw.get("namespace")), watch=True))
        return watch(self, resource, *a, **kw)

    monkeypatch.setattr(kubeapi.KubeApi, "_call", recording_call)
    monkeypatch.setattr(kubeapi.KubeApi, "watch", recording_watch)
    return seen


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[simapiserver.SimApiserver]:
    server = simapiserver.SimApiserver("127.0.0.1", port=0, seed="demo", workdir=tmp_path / "s")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_agent_cluster_role_allows_every_request_of_the_agent(
    sim: simapiserver.SimApiserver, recorded: set[Request], tmp_path: Path
) -> None:
    await cluster.kubectl(sim, "apply", "-R", "-f", str(MANIFESTS / "crds"))
    await cluster.kubectl(sim, "create", "secret", "generic", "creds", "--from-literal=k=s")
    prop = [
        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "k"}}},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}},
    ]
    configuration = {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": "cfg", "namespace": "default"},
        "spec": {
            "discoveryHandler": {
                "name": "debugEcho",
                "discoveryDetails": "descriptions: [a, b]",
                "discoveryProperties": prop,
            }
        },
    }

    async def instances() -> list[str]:
        out = json.loads(await cluster.kubectl(sim, "get", "akrii", "-A", "-o", "json"))
        return [i["metadata"]["name"] for i in out["items"]]

    def node(name: str) -> settings.AgentSettings:
        return settings.AgentSettings(
            node_name=name,
            kube=settings.KubeSettings(kubeconfig=Path(sim.kubeconfig_path)),
            discovery_handlers_dir=None,
            embedded_handlers=("debugEcho",),
            handler_environ={"DEBUG_ECHO_AVAILABILITY_FILE": str(tmp_path / "available")},
            device_plugins_dir=tmp_path / name / "dp",
            pod_resources_socket=None,
            cdi_dir=tmp_path / name / "cdi",
            metrics_port=None,
            timings=settings.Timings(backoff_initial=0.05, backoff_cap=0.3, settle=0.2),
        )

    # Two nodes share the devices: the second joins existing Instances, the first to leave
    # updates them, the last deletes them.
    async with running.running(node("node-a")), running.running(node("node-b")):
        await cluster.kubectl(sim, "apply", "-f", "-", stdin=json.dumps(configuration))

        async def warned() -> bool:  # the missing ConfigMap is reported as an Event
            return "later" in await cluster.kubectl(sim, "get", "events", "-n", "default")

        await cluster.eventually(warned)
        await cluster.kubectl(sim, "create", "configmap", "later", "--from-literal=k=v")

        async def shared() -> bool:
            out = json.loads(await cluster.kubectl(sim, "get", "akrii", "-A", "-o", "json"))
            nodes = [sorted(i["spec"]["nodes"]) for i in out["items"]]
            return nodes == [["node-a", "node-b"]] * 2

        await cluster.eventually(shared)
        await cluster.kubectl(sim, "delete", "akric", "cfg", "--wait=false")

        async def released() -> bool:
            out = json.loads(await cluster.kubectl(sim, "get", "akric", "-A", "-o", "json"))
            return not out["items"] and not await instances()

        await cluster.eventually(released)

    rules = one(MANIFESTS / "discovery" / "agent-rbac.yaml", "ClusterRole")["rules"]
    denied = sorted(r for r in recorded if not allowed(rules, r))
    assert denied == []
    # The scenario really exercised the agent's writes, or the check above proves little.
    assert {
        ("create", "akri.sh", "instances"),
        ("update", "akri.sh", "instances"),
        ("delete", "akri.sh", "instances"),
        ("update", "akri.sh", "configurations"),
        ("watch", "akri.sh", "configurations"),
        ("get", "", "configmaps"),
        ("get", "", "secrets"),
        ("create", "", "events"),
    } <= recorded


# --------------------------------------------------------------------------- the manager


async def test_manager_roles_allow_every_request_of_the_manager(
    sim: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    rbac = MANIFESTS / "manager" / "rbac.yaml"
    await cluster.kubectl(sim, "apply", "-f", str(MANIFESTS / "discovery" / "00-namespace.yaml"))
    await cluster.kubectl(sim, "apply", "-f", str(rbac))
    namespace = one(rbac, "ServiceAccount")["metadata"]["namespace"]
    account = one(rbac, "ServiceAccount")["metadata"]["name"]
    lease_name = one(rbac, "Role")["rules"][1]["resourceNames"][0]
    directory = tmp_path / "sa"
    directory.mkdir()
    (directory / "token").write_text(sim.service_account_token(namespace, account))
    (directory / "ca.crt").write_bytes(sim.ca_pem)
    manager = manager_settings.ManagerSettings(
        controllers=("csrapprover",),
        kube=manager_settings.KubeSettings(
            service_account=credentials.ServiceAccount(directory, server=sim.url)
        ),
        leader_election=manager_settings.LeaderElection(
            namespace=namespace,
            name=lease_name,
            identity="rbac-test_1",
            lease_duration=2,
            renew_deadline=1.2,
            retry_period=0.2,
        ),
        bind_address="127.0.0.1",
        health_port=0,
    )
    usages = ["client auth", "digital signature"]
    good = cs.csr("good", cs.hub_client_request("n1"), cs.CLIENT_SIGNER, usages)
    bad = cs.csr("bad", cs.hub_client_request("n1"), cs.CLIENT_SIGNER, ["client auth"])
    # The hub's first CSRs come with a bootstrap token.
    kubeconfig = sim.write_kubeconfig(
        tmp_path / "token.kubeconfig",
        "system:bootstrap:abcdef",
        ["system:bootstrappers"],
        auth="token",
    )
    async with manager_running.running(manager) as running_manager:

        async def leading() -> bool:
            return running_manager.leading

        await cluster.eventually(leading)
        for obj in (good, bad):
            await cluster.kubectl(
                sim,
                f"--kubeconfig={kubeconfig}",
                "create",
                "-f",
                "-",
                stdin=json.dumps(cs.body(obj)),
            )

        async def decided() -> bool:
            out = json.loads(await cluster.kubectl(sim, "get", "csr", "-o", "json"))
            return all((i.get("status") or {}).get("conditions") for i in out["items"])

        await cluster.eventually(decided)

        async def denial_posted() -> bool:
            return "InvalidUsages" in await cluster.kubectl(sim, "get", "events", "-n", "default")

        await cluster.eventually(denial_posted)
    user = f"system:serviceaccount:{namespace}:{account}"
    seen = checking.requests_of(sim, user)
    cluster_rules = one(rbac, "ClusterRole")["rules"]
    role_rules = one(rbac, "Role")["rules"]
    assert checking.denied(seen, cluster_rules, role_rules, namespace) == []
    # The scenario exercised every kind of request, or the check above proves little.
    kinds = checking.kinds(seen)
    assert {
        ("list", "certificates.k8s.io", "certificatesigningrequests"),
        ("watch", "certificates.k8s.io", "certificatesigningrequests"),
        ("update", "certificates.k8s.io", "certificatesigningrequests/approval"),
        ("create", "", "events"),
        ("get", "coordination.k8s.io", "leases"),
        ("create", "coordination.k8s.io", "leases"),
        ("update", "coordination.k8s.io", "leases"),
    } <= kinds


async def test_manager_roles_allow_every_request_of_the_akri_controllers_and_webhook(
    sim: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    """brokers, nodewatcher and the webhook's dry runs, with the manifests' ServiceAccount:
    pod and job brokers with both Services, a Service updated in place, a node that goes
    NotReady and one that is deleted (Instances updated and deleted, a finalizer dropped)."""
    import ssl

    import aiohttp

    from kubecontrol import controlling
    from yurthub.testing.sim import pki

    rbac = MANIFESTS / "manager" / "rbac.yaml"
    await cluster.kubectl(sim, "apply", "-R", "-f", str(MANIFESTS / "crds"))
    await cluster.kubectl(sim, "apply", "-f", str(MANIFESTS / "discovery" / "00-namespace.yaml"))
    await cluster.kubectl(sim, "apply", "-f", str(rbac))
    namespace = one(rbac, "ServiceAccount")["metadata"]["namespace"]
    account = one(rbac, "ServiceAccount")["metadata"]["name"]
    directory = tmp_path / "sa"
    directory.mkdir()
    (directory / "token").write_text(sim.service_account_token(namespace, account))
    (directory / "ca.crt").write_bytes(sim.ca_pem)
    authority = pki.Authority.create("webhook-ca")
    cert, key = authority.issue_serving(("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    fast = controlling.Timings(workers=2, resync=None, backoff_initial=0.05, backoff_cap=0.3)
    manager = manager_settings.ManagerSettings(
        controllers=("brokers", "nodewatcher"),
        kube=manager_settings.KubeSettings(
            service_account=credentials.ServiceAccount(directory, server=sim.url)
        ),
        leader_election=manager_settings.LeaderElection(enabled=False),
        bind_address="127.0.0.1",
        health_port=0,
        brokers=manager_settings.Brokers(timings=fast),
        node_watcher=manager_settings.NodeWatcher(timings=fast),
        webhook=manager_settings.Webhook(
            cert_file=tmp_path / "tls.crt",
            key_file=tmp_path / "tls.key",
            bind_address="127.0.0.1",
            port=0,
        ),
    )
    pod_broker = {"containers": [{"name": "b", "image": "nginx"}]}
    job_broker = {
        "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "j", "image": "x"}]}
        }
    }

    def config(name: str, broker: dict[str, Any], port: int = 80) -> dict[str, Any]:
        return {
            "apiVersion": "akri.sh/v0",
            "kind": "Configuration",
            "metadata": {"name": name, "namespace": "default", "finalizers": ["edge-node-2"]},
            "spec": {
                "discoveryHandler": {"name": "debugEcho", "discoveryDetails": "descriptions: []"},
                "brokerSpec": broker,
                "instanceServiceSpec": {"ports": [{"port": port}]},
                "configurationServiceSpec": {"ports": [{"port": port}]},
            },
        }

    def instance(name: str, configuration: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        return {
            "apiVersion": "akri.sh/v0",
            "kind": "Instance",
            "metadata": {
                "name": name,
                "namespace": "default",
                "ownerReferences": [
                    {
                        "apiVersion": "akri.sh/v0",
                        "kind": "Configuration",
                        "name": configuration["metadata"]["name"],
                        "uid": configuration["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "configurationName": configuration["metadata"]["name"],
                "cdiName": "akri.sh/x=y",
                "capacity": 2,
                "brokerProperties": {},
                "shared": True,
                "nodes": nodes,
                "deviceUsage": {},
            },
        }

    async with manager_running.running(manager) as running_manager:
        pods_config = sim.state.create(config("pods", {"brokerPodSpec": pod_broker}))
        jobs_config = sim.state.create(config("jobs", {"brokerJobSpec": job_broker}))
        sim.state.create(instance("pods-aaaaaa", pods_config, ["edge-node-1", "edge-node-2"]))
        sim.state.create(instance("jobs-bbbbbb", jobs_config, ["edge-node-2"]))

        async def brokered() -> bool:
            pods = sim.state.list("pods", "default", label_selector="akri.sh/configuration=pods")
            jobs = sim.state.list("jobs", "default", label_selector="akri.sh/configuration=jobs")
            services = sim.state.list("services", "default", label_selector="controller=akri.sh")
            return len(pods) == 2 and len(jobs) == 1 and len(services) == 4

        await cluster.eventually(brokered)
        changed = sim.state.get("configurations.akri.sh", "default", "pods")
        changed["spec"]["instanceServiceSpec"] = {"ports": [{"port": 8080}]}
        sim.state.update(changed)

        async def updated() -> bool:
            svc = sim.state.get("services", "default", "pods-aaaaaa-svc")
            return bool(svc["spec"]["ports"][0]["port"] == 8080)

        await cluster.eventually(updated)
        rerun = sim.state.get("configurations.akri.sh", "default", "jobs")
        rerun["spec"]["brokerSpec"]["brokerJobSpec"]["parallelism"] = 2
        sim.state.update(rerun)

        async def rerunning() -> bool:
            jobs = sim.state.list("jobs", "default", label_selector="akri.sh/configuration=jobs")
            return [j["metadata"]["name"] for j in jobs] == ["jobs-bbbbbb-2-job"]

        await cluster.eventually(rerunning)
        # The node watcher acts only on nodes it has seen, and cleans a NotReady node only if
        # it remembers it Ready: wait until it processed both nodes as they are now (in its
        # cache, its queue neither holding nor due to process them).
        (watcher,) = [c for c in running_manager.controllers if c.name == "nodewatcher"]
        pairs = [("", "edge-node-1"), ("", "edge-node-2")]

        async def seen_ready() -> bool:
            return watcher.synced and all(
                key in watcher.reflectors[0].store
                and watcher.queue.pending(key) is None
                and not watcher.queue.held(key)
                for key in pairs
            )

        await cluster.eventually(seen_ready)
        node = sim.state.get("nodes", None, "edge-node-1")
        for condition in node["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition["status"] = "False"
        sim.state.update(node)
        sim.state.delete("nodes", None, "edge-node-2")

        async def cleaned() -> bool:
            left = sim.state.list("instances.akri.sh", "default")
            finalizers = sim.state.get("configurations.akri.sh", "default", "pods")["metadata"]
            return not left and not finalizers.get("finalizers")

        await cluster.eventually(cleaned)
        trust = ssl.create_default_context(cadata=authority.cert_pem.decode())
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "1",
                "operation": "CREATE",
                "namespace": "default",
                "object": config("new", {"brokerJobSpec": job_broker}),
            },
        }
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as session,
            session.post(
                f"https://127.0.0.1:{running_manager.webhook_port}/validate", json=review
            ) as resp,
        ):
            answer = await resp.json()
        assert answer["response"]["allowed"] is True, answer
        assert "warnings" not in answer["response"], answer  # every dry run was allowed
    user = f"system:serviceaccount:{namespace}:{account}"
    seen = checking.requests_of(sim, user)
    assert checking.denied(seen, one(rbac, "ClusterRole")["rules"]) == []
    kinds = checking.kinds(seen)
    assert {
        ("watch", "akri.sh", "configurations"),
        ("watch", "akri.sh", "instances"),
        ("watch", "", "pods"),
        ("watch", "", "services"),
        ("watch", "batch", "jobs"),
        ("watch", "", "nodes"),
        ("create", "", "pods"),
        ("create", "batch", "jobs"),
        ("create", "", "services"),
        ("update", "", "services"),
        ("delete", "", "pods"),
        ("delete", "", "services"),
        ("delete", "batch", "jobs"),
        ("update", "akri.sh", "instances"),
        ("delete", "akri.sh", "instances"),
        ("get", "", "nodes"),
        ("update", "akri.sh", "configurations"),
        ("create", "", "events"),
    } <= kinds, sorted(kinds)
