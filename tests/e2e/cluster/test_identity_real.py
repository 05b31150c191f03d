"""The hub's own identity on the real control plane: a hub given a bootstrap token and nothing
else joins, gets both certificates approved and signed by kube-controller-manager, serves
10268 to a pod-like client with a ServiceAccount token, rotates both certificates while traffic
flows with zero failed requests, and survives SIGKILL in the middle of a rotation.

Approval: ``edgehub manager`` (one replica, as deployed: its ServiceAccount with the RBAC of
``manifests/manager/rbac.yaml`` and nothing more) approves the hub's CSRs; the controller-manager
signs them.

Rotation timing: the real apiserver refuses ``spec.expirationSeconds`` below 600, so the hub
asks for 600 s certificates and the hidden test flag ``--cert-renew-before=595`` renews each at
most 595 s before it expires, i.e. about 5 s after it was issued (the jittered 70-90 % rule
alone would wait 7-9 minutes). A rotation that takes longer than that only starts the next
one sooner: the hub renews one at a time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import os
import pathlib
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
import yaml
from cluster_support import REPO, token_kubeconfig
from cryptography import x509

from yurthub.certs import pemfiles
from yurthub.testing import joining, ports, processes, realcluster

pytestmark = pytest.mark.slow

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "identity-real"
NS = "identity-real"
PODS = f"/api/v1/namespaces/{NS}/pods"


async def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)
    return value


def target(link: pathlib.Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return ""


def lists_pods(port: int, headers: dict[str, str], tls: ssl.SSLContext) -> bool:
    """Whether the hub's TLS port at ``port`` answers the pod list 200 (blocking)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=5)
    try:
        conn.request("GET", PODS, headers=headers)
        with conn.getresponse() as resp:
            resp.read()
            return resp.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class Hub:
    """The ``edgehub hub`` binary, restartable, its stderr appended to one log."""

    def __init__(self, args: list[str], log: pathlib.Path) -> None:
        self.args = args
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None
        self.proxy_url = ""

    async def start(self) -> None:
        with open(self.log, "ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                EDGEHUB, "hub", *self.args, stdout=asyncio.subprocess.PIPE, stderr=err
            )
        assert self.proc.stdout is not None
        try:
            fields = await processes.read_announcement(
                self.proc.stdout, "EDGEHUB_HUB_LISTENING", 60
            )
        except (TimeoutError, processes.ProcessError) as e:
            raise AssertionError(self.log.read_text()[-3000:]) from e
        self.proxy_url = fields["proxy"]

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            await self.proc.wait()


@contextlib.asynccontextmanager
async def edgehub_manager(
    cluster: realcluster.RealCluster, workdir: pathlib.Path
) -> AsyncIterator[pathlib.Path]:
    """``edgehub manager`` with its ServiceAccount, as ``manifests/manager/`` deploys it;
    yields its log."""
    for manifest in ("discovery/00-namespace.yaml", "manager/rbac.yaml"):
        cluster.kubectl("apply", "-f", str(REPO / "manifests" / manifest))
    token = cluster.kubectl(
        "create", "token", "edgehub-manager", "-n", "edgehub-system", "--duration=1h"
    ).stdout.strip()
    kubeconfig = token_kubeconfig(
        workdir / "manager.kubeconfig", cluster.url, token, cluster.ca_pem
    )
    log = workdir / "manager.log"
    with open(log, "ab") as err:
        proc = await asyncio.create_subprocess_exec(
            EDGEHUB, "manager", f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", "--health-port=0",
            stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        yield log
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()


def approved_by_manager(csrs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        c
        for c in csrs
        if any(
            cond.get("type") == "Approved" and cond.get("reason") == "AutoApproved"
            for cond in (c.get("status") or {}).get("conditions") or []
        )
    ]


async def prepare_cluster(cluster: realcluster.RealCluster, admin: joining.Admin) -> str:
    """What kubeadm and an operator set up: cluster-info, the hubs' RBAC, a bootstrap token,
    and a namespace whose ServiceAccount may list pods (the pod-like client)."""
    kubeconfig = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "",
                    "cluster": {
                        "server": cluster.url,
                        "certificate-authority-data": base64.b64encode(cluster.ca_pem).decode(),
                    },
                }
            ],
        }
    )
    cluster.kubectl(
        "-n", "kube-public", "create", "configmap", "cluster-info",
        f"--from-literal=kubeconfig={kubeconfig}", check=False,
    )  # fmt: skip
    for manifest in ("rbac.yaml", "bootstrap-rbac.yaml"):
        cluster.kubectl("apply", "-f", str(REPO / "manifests" / "hub" / manifest))
    cluster.kubectl("create", "namespace", NS, check=False)
    cluster.kubectl("-n", NS, "create", "serviceaccount", "reader", check=False)
    cluster.kubectl(
        "-n", NS, "create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods",
        check=False,
    )  # fmt: skip
    cluster.kubectl(
        "-n", NS, "create", "rolebinding", "pod-reader", "--role=pod-reader",
        f"--serviceaccount={NS}:reader", check=False,
    )  # fmt: skip
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    return token


async def test_join_serve_rotate_and_kill_on_the_real_cluster(
    real_cluster: realcluster.RealCluster, tmp_path: pathlib.Path
) -> None:
    admin = joining.Admin.from_kubeconfig(real_cluster.admin_kubeconfig)
    token = await prepare_cluster(real_cluster, admin)
    token_id = token.split(".")[0]
    # The bootstrapsigner signs cluster-info for the new token within moments.
    await until(
        lambda: (
            f"jws-kubeconfig-{token_id}"
            in real_cluster.kubectl(
                "-n", "kube-public", "get", "cm", "cluster-info", "-o", "yaml"
            ).stdout
        ),
        30,
        "the bootstrapsigner's signature",
    )
    root = tmp_path / "root"
    secure = ports.free_port()
    hub = Hub(
        [
            f"--server-addr={real_cluster.url}",
            f"--node-name={NODE}",
            f"--join-token={token}",
            f"--discovery-token-ca-cert-hash={joining.ca_pin(real_cluster.ca_pem)}",
            f"--root-dir={root}",
            f"--disk-cache-path={tmp_path / 'cache'}",
            "--proxy-port=0",
            "--serve-port=0",
            f"--proxy-secure-port={secure}",
            # No pool: no multiplexer port (its default, 10269 on 127.0.0.1, is one for the
            # whole machine, and any other hub holding it made this hub log an ERROR).
            "--multiplexer-port=0",
            "--cache-agents=pod-client",
            "--heartbeat-interval-seconds=2",
            "--cert-expiration-seconds=600",
            "--cert-renew-before=595",
        ],
        tmp_path / "hub.log",
    )
    ca = ssl.create_default_context(cadata=real_cluster.ca_pem.decode())
    pod_token = real_cluster.kubectl("-n", NS, "create", "token", "reader").stdout.strip()
    client_link, serving_link = (
        root / "pki/yurthub-current.pem",
        root / "pki/yurthub-server-current.pem",
    )
    secure_url = f"https://127.0.0.1:{secure}"

    async with edgehub_manager(real_cluster, tmp_path) as manager_log:
        await hub.start()
        try:
            # --- joined with the token and nothing else; both signed by the controller-manager
            await until(lambda: serving_link.exists(), 60, "the serving certificate")
            authority = x509.load_pem_x509_certificate(real_cluster.ca_pem)
            for link in (client_link, serving_link):
                pair = pemfiles.load_pair(link)
                pair.certificate.verify_directly_issued_by(authority)
                assert pair.common_name == f"system:node:{NODE}"
                lifetime = pair.validity.not_after - pemfiles.load_pair(link).written
                assert 550 < lifetime.total_seconds() <= 601  # expirationSeconds honoured
            makers = {
                (c["spec"]["signerName"], c["spec"]["username"])
                for c in approved_by_manager(await admin.csrs())
                if joining.hub_csr_for(c, NODE)
            }
            assert ("kubernetes.io/kube-apiserver-client", f"system:bootstrap:{token_id}") in makers
            assert ("kubernetes.io/kubelet-serving", f"system:node:{NODE}") in makers

            # --- a pod-like client with its ServiceAccount token lists through 10268
            async with aiohttp.ClientSession() as s:
                auth = {"Authorization": f"Bearer {pod_token}", "User-Agent": "pod-client/1.0"}
                deadline = time.monotonic() + 60
                while True:
                    async with s.get(secure_url + PODS, headers=auth, ssl=ca) as r:
                        if r.status == 200:
                            assert (await r.json())["kind"] == "PodList"
                            break
                        assert time.monotonic() < deadline, (r.status, await r.text())
                    await asyncio.sleep(0.5)
                async with s.get(secure_url + PODS, ssl=ca) as r:
                    assert r.status == 401 and (await r.json())["reason"] == "Unauthorized"
            # The issuer's keys came from the real apiserver (the hub's RBAC allows it).
            await until(lambda: (root / "service-account-issuer.json").exists(), 30, "issuer keys")

            # --- rotation of both certificates while traffic flows: zero failures
            failures: list[str] = []
            done = {"n": 0}
            # Traffic ends between requests: a task cancelled inside a TLS handshake leaves
            # its transport to the garbage collector (an unraisable warning in a later test).
            stop = asyncio.Event()

            async def traffic(
                session: aiohttp.ClientSession, url: str, headers: dict[str, str], tls: Any
            ) -> None:
                while not stop.is_set():
                    try:
                        async with session.get(url, headers=headers, ssl=tls) as r:
                            await r.read()
                            if r.status != 200:
                                failures.append(f"{url}: HTTP {r.status}")
                    except (aiohttp.ClientError, OSError) as e:
                        failures.append(f"{url}: {e!r}")
                    done["n"] += 1
                    await asyncio.sleep(0.05)

            plain = hub.proxy_url
            seen = {link: {target(link)} for link in (client_link, serving_link)}

            def rotated_twice() -> bool:
                for link in seen:
                    seen[link].add(target(link))
                return all(len(v) >= 3 for v in seen.values())

            async with (
                aiohttp.ClientSession() as keepalive,
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as fresh,
                asyncio.TaskGroup() as tg,
            ):
                node_headers = {"User-Agent": "kubelet/v1.37.2"}
                tasks = [
                    tg.create_task(
                        traffic(
                            keepalive,
                            plain + "/api/v1/namespaces/default/services/kubernetes",
                            node_headers,
                            False,
                        ),
                        name="node",
                    ),
                    tg.create_task(
                        traffic(keepalive, secure_url + PODS, auth, ca), name="pod-keepalive"
                    ),
                    tg.create_task(traffic(fresh, secure_url + PODS, auth, ca), name="pod-fresh"),
                ]
                try:
                    await until(rotated_twice, 120, "two rotations of each certificate")
                finally:
                    stop.set()
                    async with asyncio.timeout(60):
                        await asyncio.gather(*tasks, return_exceptions=True)
            assert failures == [], failures[:5]
            assert done["n"] > 100

            # --- SIGKILL in the middle of a rotation, three times
            for _ in range(3):
                before = {c["metadata"]["name"] for c in await admin.csrs()}
                new_csr = await wait_new_csr(admin, before)
                await hub.kill()
                for link in (client_link, serving_link):
                    pemfiles.load_pair(link)  # a complete pair, whatever the moment
                bootstrap_csrs = count_bootstrap_csrs(await admin.csrs(), token_id)
                await hub.start()
                # A blocking client in a thread: handshakes the starting hub breaks off must
                # not leave asyncio transports to the garbage collector (a later test's
                # unraisable warning, twice in full runs).
                deadline = time.monotonic() + 30
                while not await asyncio.to_thread(lists_pods, secure, auth, ca):
                    assert time.monotonic() < deadline, (
                        f"10268 not serving after the kill ({new_csr})"
                    )
                    await asyncio.sleep(0.2)
                # It came back with its own certificates: no new bootstrap.
                assert count_bootstrap_csrs(await admin.csrs(), token_id) == bootstrap_csrs
        finally:
            await hub.stop()
        assert "Traceback" not in manager_log.read_text()
    text = hub.log.read_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
    # The pod's answers were cached in its ServiceAccount's partition (the real apiserver's
    # RS256 token verified against the JWK set the hub fetched), never under the bare name.
    listed = subprocess.run(
        [EDGEHUB, "cache", "ls", "--disk-cache-path", str(tmp_path / "cache"), "pod-client"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert f"pod-client@system:serviceaccount:{NS}:reader/pods.v1.core/{NS}" in listed, listed
    assert "pod-client/" not in listed
    assert token.split(".")[1] not in text  # the token secret never reaches the log


async def wait_new_csr(admin: joining.Admin, before: set[str]) -> str:
    """The name of the next CSR the hub makes (a rotation has begun)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for csr in await admin.csrs():
            if csr["metadata"]["name"] not in before and joining.hub_csr_for(csr, NODE):
                return str(csr["metadata"]["name"])
        await asyncio.sleep(0.05)
    raise AssertionError("the hub made no new CSR within 60 s")


def count_bootstrap_csrs(csrs: list[dict[str, Any]], token_id: str) -> int:
    return sum(1 for c in csrs if c["spec"].get("username") == f"system:bootstrap:{token_id}")
