"""The kind of a resource's objects for the answers the hub builds offline (``Kinds.kind``).

The decision is ``resourcekinds.kind_for``; this module gathers what it weighs from the cache:
the list record's or listing's kind, the discovery documents the hub keeps
(``discoverydocs`` reads ``/api`` and ``/apis`` through the hub while online; a client may have
left ``/apis/<group>/<version>`` too), and the kinds of stored objects and lists of the
resource. The documents are read only when neither the built-in table nor the list names the
kind (a custom resource), and each parsed one is kept ``MEMO_SECONDS`` (at most ``MAX_MEMO``
documents), so a flood of watches of an unknown resource costs one parse a minute, not one
each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import orjson

from yurthub import resourcekinds
from yurthub.cache import keys, store

MEMO_SECONDS = 60.0
"""How long a parsed discovery document is used before it is read again."""
MAX_MEMO = 32
"""Parsed documents kept at most (all are dropped when one more would not fit)."""
AGGREGATED_PROFILES = (
    "as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=v2",
    "as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=v2beta1",
)
"""The profiles aggregated discovery is stored under (``cache.teeing``: from the answer's
content type)."""


def document_keys(group: str, version: str) -> list[str]:
    """The stored documents that may name a kind of ``group``/``version``, smallest first: the
    legacy group-version document, then the aggregated ones. PURE."""
    legacy = f"/apis/{group}/{version}" if group else f"/api/{version}"
    root = "/apis" if group else "/api"
    try:
        out = [keys.nonresource_key(legacy)]
    except keys.BadKey:
        out = []
    return out + [keys.nonresource_key(root, profile) for profile in AGGREGATED_PROFILES]


class Kinds:
    """Names kinds over one store; ``clock``: seconds, monotonic (the loop's by default)."""

    def __init__(self, cache: store.Store, clock: Callable[[], float] | None = None) -> None:
        self._store = cache
        self._clock = clock
        self._memo: dict[str, tuple[float, resourcekinds.Discovered]] = {}

    async def kind(self, scope: keys.Scope, listed: str = "") -> str:
        """The kind of ``scope``'s objects ("" when nothing names it). ``listed``: the kind the
        list being answered recorded. A metadata-only scope's is ``PartialObjectMetadata``."""
        if scope.partial:
            return "PartialObjectMetadata"
        decided = resourcekinds.kind_for(scope.group, scope.version, scope.resource, listed=listed)
        if decided:
            return decided
        discovered: resourcekinds.Discovered = {}
        for key in document_keys(scope.group, scope.version):
            discovered = await self._discovered(key)
            if (scope.group, scope.version, scope.resource) in discovered:
                break
        return resourcekinds.kind_for(
            scope.group,
            scope.version,
            scope.resource,
            discovered=discovered,
            stored=self._stored_kinds(scope),
        )

    def _stored_kinds(self, scope: keys.Scope) -> Iterator[str]:
        """Kinds of the scope's list records, then of its stored objects (lazily)."""
        for _, record in self._store.list_records(scope):
            yield record.kind
        for _, entry in self._store.objects(scope, ordered=False):
            yield entry.kind

    async def _discovered(self, key: str) -> resourcekinds.Discovered:
        now = self._now()
        memo = self._memo.get(key)
        if memo is not None and now - memo[0] < MEMO_SECONDS:
            return memo[1]
        found = await self._store.document(key)
        if found is None:
            self._memo.pop(key, None)
            return {}
        try:
            parsed = resourcekinds.discovered(orjson.loads(found[1]))
        except orjson.JSONDecodeError:
            parsed = {}
        if len(self._memo) >= MAX_MEMO and key not in self._memo:
            self._memo.clear()
        self._memo[key] = (now, parsed)
        return parsed

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()
