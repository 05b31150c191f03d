"""Benchmark: what following a rotatable identity costs the hub.

Measured side by side in one run:

- per request: ``Upstream`` with a fixed identity vs one that follows its kubeconfig (a client
  middleware watching for 401/TLS refusals), sequential GETs to a loopback aiohttp server;
  the ratio is the hot-path overhead;
- per check: one ``kubeconfigs.changed`` round (the stat of every identity file, run every
  10 s in the executor) and one ``kubeconfigs.load`` (what a rotation costs, off the loop).

Prints absolute numbers (best of ``--repeat`` rounds) and the ratio.
Usage: ``.venv/bin/python bench/identity.py [--requests N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import tempfile
import time
from collections.abc import Callable

import yaml
from aiohttp import web

from yurthub import kubeconfigs, settings
from yurthub.proxy import upstream
from yurthub.testing.sim import pki


def _write_kubeconfig(directory: pathlib.Path) -> pathlib.Path:
    authority = pki.Authority.create("bench-ca")
    cert, key = authority.issue_client("system:node:bench")
    (directory / "kubelet-client-current.pem").write_bytes(cert + key)
    (directory / "ca.crt").write_bytes(authority.cert_pem)
    current = "kubelet-client-current.pem"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": "https://127.0.0.1", "certificate-authority": "ca.crt"},
            }
        ],
        "users": [{"name": "u", "user": {"client-certificate": current, "client-key": current}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = directory / "kubelet.conf"
    path.write_text(yaml.safe_dump(doc))
    return path


async def _answer(request: web.Request) -> web.Response:
    return web.Response(body=b"{}")


async def _requests(url: str, client: upstream.Upstream, count: int) -> float:
    await client.start()
    try:
        start = time.perf_counter()
        for _ in range(count):
            async with client.session.get(url) as resp:
                await resp.read()
        return (time.perf_counter() - start) / count
    finally:
        await client.close()


def _timed(fn: Callable[[], object], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        fn()
    return (time.perf_counter() - start) / count


async def main(requests: int, repeat: int) -> None:
    app = web.Application()
    app.router.add_get("/x", _answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/x"
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = _write_kubeconfig(pathlib.Path(tmp))
        identity = kubeconfigs.load(kubeconfig)
        upstream_settings = settings.UpstreamSettings(servers=(url,))
        fixed, following = [], []
        for _ in range(repeat):
            fixed.append(
                await _requests(url, upstream.Upstream(upstream_settings, identity), requests)
            )
            following.append(
                await _requests(
                    url,
                    upstream.Upstream(upstream_settings, identity, kubeconfig=kubeconfig),
                    requests,
                )
            )
        check = min(
            _timed(lambda: kubeconfigs.changed(identity.files), 2000) for _ in range(repeat)
        )
        load = min(_timed(lambda: kubeconfigs.load(kubeconfig), 50) for _ in range(repeat))
    await runner.cleanup()
    print(f"request, fixed identity:      {min(fixed) * 1e6:8.1f} us")
    print(f"request, followed identity:   {min(following) * 1e6:8.1f} us")
    print(f"ratio followed/fixed:         {min(following) / min(fixed):8.3f}")
    print(f"identity check (stat round):  {check * 1e6:8.1f} us  (every 10 s, in the executor)")
    print(f"identity reload (load):       {load * 1e3:8.2f} ms  (per rotation, in the executor)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.repeat))
