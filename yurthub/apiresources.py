"""The apiserver's resource names, learned from its aggregated discovery, for metric labels.

One task per hub (``follow``, owned by the hub's TaskGroup): once a backend is healthy, and then
every ``REFRESH`` seconds, it asks a healthy apiserver for ``/api`` and ``/apis`` as
``APIGroupDiscoveryList`` (aggregated discovery, Kubernetes 1.30+) with the hub's own identity,
and lets ``labels.Bounds`` learn the resource and subresource names listed. Until then, or
against an apiserver that cannot answer so, the labels keep to Kubernetes' built-in names and
everything else is ``other``: nothing here is needed for the proxy to work.

Bounded: each answer is read up to ``MAX_BYTES``; ``Bounds.learn`` keeps at most
``labels.MAX_LEARNED`` names. A failure is logged at debug level and retried at the next round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp
import orjson

from yurthub import labels
from yurthub.proxy import upstream

log = logging.getLogger(__name__)

REFRESH = 600.0
"""Seconds between two looks (CRDs added meanwhile are ``other`` until then)."""
RETRY = 30.0
"""Seconds before the next try after a failed one, or while no backend is healthy."""
MAX_BYTES = 16 << 20
CALL_TIMEOUT = 20.0
"""Seconds for both documents."""
ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
)
USER_AGENT = "edgehub/discovery"


async def follow(
    client: upstream.Upstream,
    healthy_server: Callable[[], str | None],
    bounds: labels.Bounds,
) -> None:
    """Until cancelled: learn the names ``healthy_server()``'s discovery lists."""
    while True:
        server = healthy_server()
        delay = RETRY
        if server is not None:
            try:
                async with asyncio.timeout(CALL_TIMEOUT):
                    resources, subresources = await _fetch(client, server)
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
                log.debug("discovery for metric labels from %s failed: %r", server, e)
            else:
                bounds.learn(resources, subresources)
                delay = REFRESH
        await asyncio.sleep(delay)


async def _fetch(client: upstream.Upstream, server: str) -> tuple[set[str], set[str]]:
    resources: set[str] = set()
    subresources: set[str] = set()
    headers = {"Accept": ACCEPT, "User-Agent": USER_AGENT, **client.identity_headers()}
    for path in ("/api", "/apis"):
        async with client.session.get(
            server + path,
            headers=headers,
            ssl=client.ssl_for(server, own_identity=True),
            allow_redirects=False,
        ) as resp:
            if resp.status != 200:
                raise ValueError(f"GET {path}: HTTP {resp.status}")
            body = bytearray()
            # read(n) returns what has arrived: loop to the end, bounded.
            while chunk := await resp.content.read(1 << 16):
                body += chunk
                if len(body) > MAX_BYTES:
                    raise ValueError(f"GET {path}: larger than {MAX_BYTES} bytes")
        found, found_sub = labels.aggregated_names(orjson.loads(body))
        resources |= found
        subresources |= found_sub
    return resources, subresources
