"""Run inside a network namespace by ``test_hub_dummy_if.py`` (``ip netns exec``): a simulated
cluster on the namespace's loopback, a hub with ``--enable-dummy-if`` joining it, and what a pod
sees on 169.254.2.1. Prints one JSON line of findings; the test asserts on them."""

from __future__ import annotations

import asyncio
import json
import pathlib
import ssl
import subprocess
import sys
import tempfile

import aiohttp

from yurthub import server, settings
from yurthub.certs import modes
from yurthub.testing import joining, ports, simapiserver

NODE = "edge-1"


def addresses(name: str) -> str:
    done = subprocess.run(["ip", "-o", "addr", "show", "dev", name], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else ""


async def until(check, timeout: float = 15.0):  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := check()):
        if loop.time() > deadline:
            raise TimeoutError(str(check))
        await asyncio.sleep(0.05)
    return value


async def main() -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="dummyif-") as work:
        return await in_workdir(pathlib.Path(work))


async def in_workdir(work: pathlib.Path) -> dict[str, object]:
    found: dict[str, object] = {}
    async with simapiserver.SimApiserver(workdir=work / "sim") as sim:
        admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
        token = joining.new_token()
        await admin.create_bootstrap_token(token)
        proxy_port, secure_port = ports.free_port(), ports.free_port()
        hub_settings = settings.HubSettings(
            node_name=NODE,
            upstream=settings.UpstreamSettings(servers=(sim.url,), connect_timeout=1.0),
            listen=settings.ListenSettings(
                serve_port=0,
                proxy_port=proxy_port,
                proxy_secure_port=secure_port,
                enable_dummy_if=True,
                dummy_if_recheck=0.3,
            ),
            heartbeat=settings.HeartbeatSettings(interval=0.5, timeout=1.0, healthy_threshold=1),
            certs=settings.CertSettings(
                source=modes.Source.JOIN_TOKEN,
                root_dir=work / "root",
                join_token=token,
                ca_cert_hashes=(joining.ca_pin(sim.ca_pem),),
                retry_base=0.2,
                retry_cap=1.0,
            ),
        )
        pod_token = sim.service_account_token("kube-system", "default")
        ca = ssl.create_default_context(cadata=sim.ca_pem.decode())
        async with joining.approving(admin, node_name=NODE):
            hub = server.Hub(hub_settings)
            await hub.start()
            try:
                await until(lambda: hub.secure_url)
                assert hub.health is not None
                await until(hub.health.any_healthy)
                found["secure_url"] = hub.secure_url
                found["addresses"] = addresses("hub-dummy0")
                async with aiohttp.ClientSession() as s:
                    url = f"https://169.254.2.1:{secure_port}/api/v1/namespaces/kube-system/pods"
                    async with s.get(
                        url, headers={"Authorization": f"Bearer {pod_token}"}, ssl=ca
                    ) as r:
                        found["secure_status"] = r.status  # the IP is a verified SAN
                    async with s.get(url, ssl=ca) as r:
                        found["secure_anonymous"] = r.status
                    plain = f"http://169.254.2.1:{proxy_port}/api/v1/namespaces/kube-system/pods"
                    async with s.get(plain) as r:
                        found["plain_status"] = r.status
                # The hub server port's node-only endpoints, called from a local address that
                # is not loopback (what a caller elsewhere would be if the port were bound
                # beyond loopback): refused, whatever the body.
                away = aiohttp.TCPConnector(local_addr=("169.254.2.1", 0))
                async with aiohttp.ClientSession(connector=away) as s:
                    async with s.post(
                        hub.server_url + "/v1/token",
                        data=b'{"jointoken": "abcdef.0123456789abcdef"}',
                    ) as r:
                        found["token_from_afar"] = [r.status, await r.text()]
                    async with s.get(hub.server_url + "/pods") as r:
                        found["ota_from_afar"] = r.status
                    for path in ("/v1/outages", "/v1/status"):
                        async with s.get(hub.server_url + path) as r:
                            found[f"{path}_from_afar"] = [r.status, await r.text()]
                    async with s.get(hub.server_url + "/v1/healthz") as r:
                        found["healthz_from_afar"] = r.status  # a probe: open to all
                async with aiohttp.ClientSession() as s:  # from loopback: answered
                    for path in ("/v1/outages", "/v1/status"):
                        async with s.get(hub.server_url + path) as r:
                            found[f"{path}_from_loopback"] = r.status
                subprocess.run(["ip", "link", "del", "hub-dummy0"], check=True)
                await until(lambda: "169.254.2.1/32" in addresses("hub-dummy0"))
                found["recreated"] = True
            finally:
                await hub.stop(grace=1.0)
        found["after_stop"] = addresses("hub-dummy0")
    return found


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
    sys.stdout.flush()
