"""Helpers for the hub identity tests: settings, a running hub, TLS clients, waiting.

(A unique module name: several test directories have a conftest.)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
from cryptography import x509

from yurthub import server, settings
from yurthub.certs import modes
from yurthub.testing import ports

NODE = "edge-1"


def hub_settings(
    servers: tuple[str, ...],
    root: pathlib.Path,
    *,
    source: modes.Source = modes.Source.JOIN_TOKEN,
    token: str = "",
    pins: tuple[str, ...] = (),
    skip_ca: bool = False,
    secure_port: int = 0,
    heartbeat: settings.HeartbeatSettings | None = None,
    **certs: Any,
) -> settings.HubSettings:
    return settings.HubSettings(
        node_name=NODE,
        upstream=settings.UpstreamSettings(
            servers=servers, connect_timeout=1.0, identity_check_interval=1.0
        ),
        listen=settings.ListenSettings(
            serve_port=0, proxy_port=0, proxy_secure_port=secure_port or ports.free_port()
        ),
        heartbeat=heartbeat
        or settings.HeartbeatSettings(
            interval=0.5, timeout=1.0, healthy_threshold=1, failed_retry=1
        ),
        proxy=settings.ProxySettings(shutdown_grace=1.0),
        certs=settings.CertSettings(
            **{
                "source": source,
                "root_dir": root,
                "join_token": token,
                "ca_cert_hashes": pins,
                "unsafe_skip_ca_verification": skip_ca,
                "retry_base": 0.2,
                "retry_cap": 1.0,
                "csr_wait_timeout": 30.0,
                **certs,
            }
        ),
        authn=settings.AuthnSettings(issuer_keys_file=root / "service-account-issuer.json"),
    )


@contextlib.asynccontextmanager
async def running(hub_settings: settings.HubSettings) -> AsyncIterator[server.Hub]:
    hub = server.Hub(hub_settings)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop(grace=1.0)


async def until(check: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.05)


def trusting(ca_pem: bytes, cert: pathlib.Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    if cert is not None:
        ctx.load_cert_chain(cert)
    return ctx


@dataclasses.dataclass
class Answer:
    status: int
    body: Any


async def get(
    url: str,
    *,
    ctx: ssl.SSLContext | bool = False,
    token: str = "",
    ua: str = "pod-client/1.0",
    session: aiohttp.ClientSession | None = None,
) -> Answer:
    headers = {"User-Agent": ua, "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    own = session is None
    session = session or aiohttp.ClientSession()
    try:
        async with session.get(url, headers=headers, ssl=ctx) as resp:
            raw = await resp.read()
            try:
                body = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                body = raw.decode(errors="replace")
            return Answer(resp.status, body)
    finally:
        if own:
            await session.close()


async def serving_serial(url: str, ctx: ssl.SSLContext) -> int:
    """The serial number of the certificate a new TLS connection to ``url`` is shown."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port), ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()


async def readyz(hub: server.Hub) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(hub.server_url + "/v1/readyz") as r:
        return r.status, await r.text()
