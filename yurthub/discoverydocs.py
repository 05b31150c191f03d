"""Keeping the discovery documents kubectl needs in the cache, whoever asked for them online.

kubectl (and any client-go program with a fresh discovery cache) starts by reading ``/api`` and
``/apis`` (aggregated discovery, ``APIGroupDiscoveryList``) and ``/version``. Offline the hub
answers them only from its cache, which holds what some client read through the hub while
online: a kubectl run for the first time offline met 404s and printed ``couldn't get current
server API group list`` five times. So the hub reads them itself, through its OWN proxy (the tee
stores them as any client's answer), once the cloud is reachable and every ``REFRESH`` seconds
after: both the aggregated and the legacy form, and ``/version``.

One task per hub (owned by the assembly's TaskGroup). Bounded: five small GETs per round, each
within ``CALL_TIMEOUT``; a failure is logged at debug level and retried after ``RETRY`` seconds.
Nothing here is needed for the proxy to work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp

from yurthub import following

log = logging.getLogger(__name__)

USER_AGENT = "yurthub/edgehub-discovery"
"""The hub's own component (``yurthub``): cached as the hub's, never filtered (the readiness
gate lets it through because it comes over the hub's own socket)."""
AGGREGATED = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)
DOCUMENTS = (
    ("/version", "application/json"),
    ("/api", AGGREGATED),
    ("/apis", AGGREGATED),
    ("/api", "application/json"),
    ("/apis", "application/json"),
)
REFRESH = 600.0
"""Seconds between two rounds (a CRD installed meanwhile shows offline after the next one)."""
RETRY = 30.0
"""Seconds before the next try after a failed round, or while the cloud is away."""
NOT_READY_RETRY = 2.0
"""Seconds before the next try after a 503 (the cloud just went away, or a route that is not
the hub's own socket meets the readiness gate)."""
CALL_TIMEOUT = 20.0
MAX_BYTES = 16 << 20


async def keep_cached(route: following.ProxyRoute, cloud_healthy: Callable[[], bool]) -> None:
    """Until cancelled: read the documents through the hub (``route``: ``hub.own_route``) while
    the cloud is healthy."""
    async with route.session() as session:
        while True:
            delay = RETRY
            if cloud_healthy():
                try:
                    async with asyncio.timeout(CALL_TIMEOUT):
                        await _read_all(session, route.url)
                except asyncio.CancelledError:
                    raise
                except _NotReady:
                    delay = NOT_READY_RETRY
                except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
                    log.debug("reading the discovery documents through the hub failed: %r", e)
                else:
                    delay = REFRESH
            await asyncio.sleep(delay)


class _NotReady(Exception):
    """The hub answered 503: not ready yet (or the cloud just went away)."""


async def _read_all(session: aiohttp.ClientSession, proxy_url: str) -> None:
    for path, accept in DOCUMENTS:
        async with session.get(
            proxy_url + path,
            headers={"Accept": accept, "User-Agent": USER_AGENT},
            allow_redirects=False,
        ) as resp:
            if resp.status == 503:
                raise _NotReady
            if resp.status != 200:
                why = (await resp.content.read(300)).decode(errors="replace")
                raise ValueError(f"GET {path}: HTTP {resp.status}: {why}")
            size = 0
            # Read to the end (the tee stores a document only once it is whole), bounded.
            while chunk := await resp.content.read(1 << 16):
                size += len(chunk)
                if size > MAX_BYTES:
                    raise ValueError(f"GET {path}: larger than {MAX_BYTES} bytes")
