"""Fuzz-style: random methods, paths, parameters, headers and bodies through the hub with its
cache, online and offline (bounded, loopback, a fixed seed). No answer of 500 or more may come
without a ``Status`` body, the hub may log no internal error, and it must keep serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import random
import string
from collections.abc import Coroutine
from typing import Any

import aiohttp
import orjson
import pytest
from cache_edge import KUBELET_UA, NODE, Edge, edge_node

pytestmark = pytest.mark.slow

ROUNDS = 250
METHODS = ["GET", "GET", "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "BREW"]
RESOURCES = ["pods", "nodes", "configmaps", "secrets", "leases", "events", "services", "x"]
ACCEPTS = [
    "application/json",
    "application/vnd.kubernetes.protobuf",
    "application/vnd.kubernetes.protobuf,application/json",
    "application/json;as=Table;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    "application/json;as=Table;v=v9;g=x",
    "application/yaml",
    "*/*",
    "text/html,;;;,,=",
    "",
]
CONTENT_TYPES = [
    "application/json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/json-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
    "",
]
AGENTS = [KUBELET_UA, "kube-proxy/v1.32", "kubectl/v1.32", "curl/8", "", "\u00e9\u00e9/1"]


def text(rnd: random.Random, n: int) -> str:
    alphabet = string.ascii_letters + string.digits + "-._~%/?&=:@!$'()*+,;\u00e9\u4e2d "
    return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, n)))


def path(rnd: random.Random) -> str:
    resource = rnd.choice(RESOURCES)
    name = rnd.choice(["", "web-0", NODE, text(rnd, 12), "..", "a%2Fb", "x" * 300])
    namespace = rnd.choice(["", "default", "kube-system", text(rnd, 8)])
    parts = ["api", "v1"] if rnd.random() < 0.6 else ["apis", rnd.choice(["apps", "x.y"]), "v1"]
    if rnd.random() < 0.1:
        parts.append("watch")
    if namespace:
        parts += ["namespaces", namespace]
    parts.append(resource)
    if name:
        parts.append(name)
        if rnd.random() < 0.2:
            parts.append(rnd.choice(["status", "log", "eviction", "token", text(rnd, 6)]))
    if rnd.random() < 0.1:
        return "/" + rnd.choice(["version", "healthz", "api", "apis", "openapi/v2", text(rnd, 20)])
    return "/" + "/".join(parts)


def params(rnd: random.Random) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, values in (
        ("labelSelector", ["app=web", "app in (a,b)", "!x", "a=", text(rnd, 15)]),
        ("fieldSelector", [f"spec.nodeName={NODE}", "metadata.name=web-0", text(rnd, 15)]),
        ("resourceVersion", ["0", "", "99999999999", "abc"]),
        ("timeoutSeconds", ["1", "0", "-1", "x", "99999999999999999999999"]),
        ("timeout", ["1s", "5x", "-3s", "1h"]),
        ("limit", ["1", "500", "-1", "x"]),
        ("continue", ["", text(rnd, 20)]),
        ("watch", ["true", "1", "false"]),
        ("includeObject", ["Object", "None", "Metadata", "x"]),
    ):
        if rnd.random() < 0.2:
            out[key] = rnd.choice(values)
    if out.get("watch") in ("true", "1"):
        out["timeoutSeconds"] = "1"  # a watch held open offline ends by itself
    return out


def body(rnd: random.Random) -> bytes | None:
    choice = rnd.random()
    if choice < 0.4:
        return None
    if choice < 0.7:
        obj: Any = {
            "apiVersion": rnd.choice(["v1", "x/y", 5]),
            "kind": rnd.choice(["Pod", "Lease", "Status", "TokenRequest", None]),
            "metadata": rnd.choice([{"name": "web-0", "namespace": "default"}, "x", None, {}]),
            "spec": rnd.choice([{}, [], {"nodeName": NODE}, "s"]),
        }
        return orjson.dumps(obj)
    return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 2000)))


async def one(
    edge: Edge, session: aiohttp.ClientSession, rnd: random.Random, bad: list[str]
) -> None:
    method = rnd.choice(METHODS)
    target = path(rnd)
    url = edge.url + target
    query = params(rnd)
    if "/watch/" in target:
        query["timeoutSeconds"] = "1"  # a watch held open offline ends by itself
    headers = {
        "User-Agent": rnd.choice(AGENTS),
        "Accept": rnd.choice(ACCEPTS),
        "Content-Type": rnd.choice(CONTENT_TYPES),
    }
    if rnd.random() < 0.2:
        headers["Authorization"] = rnd.choice(["Bearer x", "Basic Zm9v", "Bearer", text(rnd, 10)])
    if rnd.random() < 0.1:
        headers["Impersonate-User"] = "system:admin"
    data = body(rnd)
    try:
        async with (
            asyncio.timeout(5),
            session.request(method, url, params=query, headers=headers, data=data) as resp,
        ):
            raw = await resp.content.read(1 << 20)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeError):
        return  # the client refused to send it, or gave up: nothing the hub did
    if status >= 500 and method != "HEAD":  # a HEAD answer has no body by definition
        try:
            decoded = orjson.loads(raw)
        except orjson.JSONDecodeError:
            decoded = None
        if not isinstance(decoded, dict) or decoded.get("kind") != "Status":
            bad.append(f"{method} {url}: {status} {raw[:120]!r}")


async def garbage(edge: Edge, rnd: random.Random) -> None:
    host, port = edge.url.removeprefix("http://").rsplit(":", 1)

    async def once(payload: bytes) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(payload)
            await writer.drain()
            with contextlib.suppress(TimeoutError, ConnectionError):
                async with asyncio.timeout(2):
                    await reader.read(65536)
        finally:
            writer.close()

    heads = [b"GET / HTTP/1.1\r\n", b"GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n",
             b"\x16\x03\x01", b""]  # fmt: skip
    payloads = [
        rnd.choice(heads) + bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 500)))
        + b"\r\n\r\n"
        for _ in range(30)
    ]  # fmt: skip
    await asyncio.gather(*(once(p) for p in payloads))


async def bounded(slots: asyncio.Semaphore, request: Coroutine[Any, Any, None]) -> None:
    async with slots:
        await request


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> Any:
    async with edge_node(tmp_path, agents=("kubectl", "curl")) as node:
        yield node


async def test_random_requests_never_crash_the_hub(
    edge: Edge, caplog: pytest.LogCaptureFixture
) -> None:
    rnd = random.Random(14)
    bad: list[str] = []
    slots = asyncio.Semaphore(25)
    await edge.kubectl("get", "pods", "-A")
    with caplog.at_level(logging.ERROR):
        async with aiohttp.ClientSession() as session:
            for phase in ("online", "offline"):
                if phase == "offline":
                    await edge.cut()
                await asyncio.gather(
                    *(bounded(slots, one(edge, session, rnd, bad)) for _ in range(ROUNDS))
                )
                await garbage(edge, rnd)
            await edge.heal()
            status, _ = await edge.get(f"/api/v1/nodes/{NODE}")
            assert status == 200  # still serving
    assert not bad, bad[:5]
    # Errors only: INFO lines logged before the block (the issuer keys fetched once the cloud
    # answers, at a moment that depends on timing) are in caplog.records too.
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("yurthub") and r.levelno >= logging.ERROR
    ]
    assert not errors, errors[:5]
