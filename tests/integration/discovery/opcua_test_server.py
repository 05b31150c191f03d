"""A real asyncua server on loopback acting as a Local Discovery Server for tests.

Run as a script: prints one JSON line ``{"url": ...}`` when serving and stops when its
standard input closes. Besides itself it knows (via RegisterServer) a server with an HTTP and
an opc.tcp URL, a ClientAndServer, a duplicate URL, a discovery server and a client.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

from asyncua import ua
from asyncua.server.server import Server

from yurthub.testing import ports


def _registered(name: str, kind: ua.ApplicationType, *urls: str) -> ua.RegisteredServer:
    return ua.RegisteredServer(
        ServerUri=f"urn:edgehub:test:{name.replace(' ', '-').lower()}",
        ProductUri="urn:edgehub:test",
        ServerNames=[ua.LocalizedText(name)],
        ServerType=kind,
        DiscoveryUrls=list(urls),
        IsOnline=True,
    )


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    port = ports.free_port()
    base = f"opc.tcp://127.0.0.1:{port}"
    server = Server()
    await server.init()
    server.set_endpoint(f"{base}/lds/")
    server.set_server_name("Test LDS")
    await server.start()
    for registered in (
        _registered(
            "Server B", ua.ApplicationType.Server, f"http://127.0.0.1:{port}/b", f"{base}/b/"
        ),
        _registered("Server C", ua.ApplicationType.ClientAndServer, f"{base}/c/"),
        _registered("Server B2", ua.ApplicationType.Server, f"{base}/b/"),
        _registered("Discovery D", ua.ApplicationType.DiscoveryServer, f"{base}/d/"),
        _registered("Client E", ua.ApplicationType.Client, f"{base}/e/"),
    ):
        server.iserver.register_server(registered)
    print(json.dumps({"url": f"{base}/lds/", "base": base}), flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await server.stop()


if __name__ == "__main__":
    asyncio.run(main())
