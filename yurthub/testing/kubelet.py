"""A kubelet-like client: replays what a kubelet asks of its apiserver, and records what failed.

Point it at a hub (or an apiserver) and let it run while you cut the link::

    client = kubelet.KubeletClient(hub.proxy_url, "edge-node-1", lease_interval=1.0)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(client.run(), name="kubelet-like")
        ...                                  # partition, heal, assert
        task.cancel()
    assert not client.failures_after(detected_at, reads_only=True)

What it does, like kubelet v1.32 (``User-Agent: kubelet/v1.32.4 (linux/amd64) kubernetes/abcdef0``,
``Accept: application/vnd.kubernetes.protobuf,application/json`` — the simulated apiserver
answers JSON, and so does the hub's cache; it reads JSON only, so it is for the simulator):

- pods: list with ``fieldSelector=spec.nodeName=<node>``, then watch from the list's
  resourceVersion (bookmarks allowed, server timeout 5-10 min); a closed watch is re-watched
  from the last version, a 410 relists, an error (or a watch that ended within a second without
  an event, client-go's "very short watch") backs off and relists;
- services: list + watch the same way;
- node: GET the node and PATCH its status (a Ready heartbeat) every ``status_interval``;
- lease: GET ``kube-node-lease/<node>``, create it on 404, PUT a renewal every
  ``lease_interval`` (default 10 s);
- for every pod it sees: GET the ConfigMaps and Secrets its volumes and env reference, and
  POST an Event.

Every request is timed. ``failures`` holds each error (timestamp, what, why) and ``stalls``
each request slower than ``stall_after`` seconds; ``in_flight`` the requests (not watches)
sent and not answered yet, so tests can wait for one to be out or to end instead of
sleeping (at most one per loop: each loop waits for its answer), and ``watching`` the
resources whose watch is open now (answered 200, not ended yet); ``watch_starts`` counts watch
(re-)establishments per resource; ``pods``/``services`` hold what list+watch delivered.

Danger: this is a test tool. It never retries faster than its backoff, and everything it
starts belongs to ``run``'s TaskGroup (cancel the task to stop it).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import random
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

logger = logging.getLogger(__name__)

USER_AGENT = "kubelet/v1.32.4 (linux/amd64) kubernetes/abcdef0"
ACCEPT = "application/vnd.kubernetes.protobuf,application/json"
READ_VERBS = frozenset({"get", "list"})
SHORT_WATCH = 1.0
"""Seconds: client-go's "very short watch" (ended sooner, no event) is an error, not a re-watch."""


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    at: float
    """``time.monotonic()`` when it was seen."""
    started: float
    """When the failed request was sent (monotonic)."""
    verb: str
    what: str
    error: str

    @property
    def is_read(self) -> bool:
        return self.verb in READ_VERBS


@dataclasses.dataclass(frozen=True, slots=True)
class Stall:
    at: float
    """When the slow request started (monotonic)."""
    verb: str
    what: str
    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class Sent:
    """A request in flight (``KubeletClient.in_flight``)."""

    started: float
    """When it was sent (monotonic)."""
    verb: str
    what: str

    @property
    def is_read(self) -> bool:
        return self.verb in READ_VERBS


class _Gone(Exception):
    """410: the watch must relist."""


class _ShortWatch(Exception):
    """A watch that ended at once without an event: back off and relist (client-go does)."""


class RequestFailed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class KubeletClient:
    def __init__(
        self,
        base_url: str,
        node_name: str,
        *,
        lease_interval: float = 10.0,
        status_interval: float = 10.0,
        request_timeout: float = 10.0,
        stall_after: float = 1.0,
        watch_timeout: tuple[int, int] = (300, 600),
        token: str = "",
        retry_backoff: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.node_name = node_name
        self.lease_interval = lease_interval
        self.status_interval = status_interval
        self.request_timeout = request_timeout
        self.stall_after = stall_after
        self.watch_timeout = watch_timeout
        self.retry_backoff = retry_backoff
        self._headers = {"User-Agent": USER_AGENT, "Accept": ACCEPT}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.failures: list[Failure] = []
        self.stalls: list[Stall] = []
        self.in_flight: dict[int, Sent] = {}
        """Requests (not watches) sent and not answered yet, by their sequence number."""
        self.watching: set[str] = set()
        """Resources whose watch is open now (its answer began with a 200 and has not ended)."""
        self.watch_starts: collections.Counter[str] = collections.Counter()
        self.watch_log: list[tuple[float, str]] = []
        """(monotonic start time, resource) of every watch request."""
        self.lists: collections.Counter[str] = collections.Counter()
        self.pods: dict[str, dict[str, Any]] = {}
        self.services: dict[str, dict[str, Any]] = {}
        self.requests = 0
        self._seen_pods: set[str] = set()
        self._session: aiohttp.ClientSession | None = None

    # --- what tests read ---------------------------------------------------------------------

    def failures_after(self, at: float, *, reads_only: bool = False) -> list[Failure]:
        """Failures of requests SENT at or after ``at``."""
        return [f for f in self.failures if f.started >= at and (f.is_read or not reads_only)]

    def stalls_after(self, at: float, *, reads_only: bool = False) -> list[Stall]:
        return [s for s in self.stalls if s.at >= at and (s.verb in READ_VERBS or not reads_only)]

    # --- running -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Run every loop until cancelled."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.request_timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self._list_watch("pods", self.pods), name="kubelet-pods")
                    tg.create_task(
                        self._list_watch("services", self.services), name="kubelet-services"
                    )
                    tg.create_task(self._lease_loop(), name="kubelet-lease")
                    tg.create_task(self._status_loop(), name="kubelet-node-status")
            finally:
                self._session = None

    # --- requests ----------------------------------------------------------------------------

    async def _request(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (200, 201),
    ) -> tuple[int, dict[str, Any]]:
        """One request; returns (status, decoded body). Errors are recorded and raised."""
        assert self._session is not None
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        started = time.monotonic()
        what = f"{method} {path}"
        self.requests += 1
        number = self.requests
        self.in_flight[number] = Sent(started, verb, what)
        try:
            async with asyncio.timeout(self.request_timeout):
                async with self._session.request(
                    method, self.base_url + path, params=params, data=data, headers=headers
                ) as resp:
                    raw = await resp.read()
                    status = resp.status
        except (aiohttp.ClientError, TimeoutError) as e:
            self._record(started, verb, what, repr(e))
            raise
        finally:
            del self.in_flight[number]
            elapsed = time.monotonic() - started
            if elapsed > self.stall_after:
                self.stalls.append(Stall(started, verb, what, elapsed))
        try:
            decoded = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            decoded = {}
        if status not in ok:
            message = str(decoded.get("message", "")) if isinstance(decoded, dict) else ""
            error = RequestFailed(status, message)
            self._record(started, verb, what, str(error))
            raise error
        return status, decoded if isinstance(decoded, dict) else {}

    def _record(self, started: float, verb: str, what: str, error: str) -> None:
        self.failures.append(Failure(time.monotonic(), started, verb, what, error))
        logger.debug("kubelet-like %s failed: %s", what, error)

    # --- list + watch -------------------------------------------------------------------------

    def _collection(self, resource: str) -> tuple[str, dict[str, str]]:
        if resource == "pods":
            return "/api/v1/pods", {"fieldSelector": f"spec.nodeName={self.node_name}"}
        return f"/api/v1/{resource}", {}

    async def _list_watch(self, resource: str, into: dict[str, dict[str, Any]]) -> None:
        path, selector = self._collection(resource)
        while True:
            try:
                _, body = await self._request("list", "GET", path, params=selector)
                self.lists[resource] += 1
                into.clear()
                for item in body.get("items") or ():
                    into[_name(item)] = item
                    await self._pod_seen(resource, item)
                rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
                while True:
                    rv = await self._watch(resource, path, selector, rv, into)
            except asyncio.CancelledError:
                raise
            except _Gone:
                continue
            except (aiohttp.ClientError, TimeoutError, RequestFailed, ValueError, _ShortWatch):
                pass
            await asyncio.sleep(self.retry_backoff * (1 + random.random()))

    async def _watch(
        self,
        resource: str,
        path: str,
        selector: Mapping[str, str],
        rv: str,
        into: dict[str, dict[str, Any]],
    ) -> str:
        assert self._session is not None
        params = {
            **selector,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(random.randint(*self.watch_timeout)),
        }
        if rv:
            params["resourceVersion"] = rv
        self.watch_starts[resource] += 1
        started = time.monotonic()
        self.watch_log.append((started, resource))
        what = f"WATCH {path}"
        try:
            async with asyncio.timeout(self.request_timeout):
                resp = await self._session.get(
                    self.base_url + path, params=params, headers=self._headers
                )
        except (aiohttp.ClientError, TimeoutError) as e:
            self._record(started, "watch", what, repr(e))
            raise
        events = 0
        async with resp:
            if resp.status == 410:
                raise _Gone
            if resp.status != 200:
                error = RequestFailed(resp.status, (await resp.text())[:200])
                self._record(started, "watch", what, str(error))
                raise error
            self.watching.add(resource)
            try:
                async for line in resp.content:
                    if not line.strip():
                        continue
                    events += 1
                    event = orjson.loads(line)
                    obj = event.get("object") or {}
                    kind = event.get("type")
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise _Gone
                        raise RequestFailed(int(obj.get("code") or 500), str(obj.get("message")))
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        into.pop(_name(obj), None)
                    else:
                        into[_name(obj)] = obj
                        await self._pod_seen(resource, obj)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as e:
                # A watch cut mid-stream: like client-go, re-watch from the last version.
                logger.debug("kubelet-like watch %s ended: %r", resource, e)
            finally:
                self.watching.discard(resource)
        if not events and time.monotonic() - started < SHORT_WATCH:
            raise _ShortWatch
        return rv

    # --- per-pod work -------------------------------------------------------------------------

    async def _pod_seen(self, resource: str, pod: Mapping[str, Any]) -> None:
        if resource != "pods":
            return
        name = _name(pod)
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        for kind, ref in _references(pod):
            path = f"/api/v1/namespaces/{_q(namespace)}/{kind}/{_q(ref)}"
            try:
                await self._request("get", "GET", path, ok=(200, 404))
            except (aiohttp.ClientError, TimeoutError, RequestFailed):
                pass
        if name in self._seen_pods:
            return
        self._seen_pods.add(name)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name')}.{random.getrandbits(40):x}",
                "namespace": namespace,
            },
            "involvedObject": {"kind": "Pod", "namespace": namespace, "name": meta.get("name")},
            "reason": "Started",
            "message": "Started container",
            "type": "Normal",
            "source": {"component": "kubelet", "host": self.node_name},
        }
        try:
            await self._request(
                "create", "POST", f"/api/v1/namespaces/{_q(namespace)}/events", body=event
            )
        except (aiohttp.ClientError, TimeoutError, RequestFailed):
            pass

    # --- lease and node status ----------------------------------------------------------------

    async def _lease_loop(self) -> None:
        path = (
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{_q(self.node_name)}"
        )
        lease: dict[str, Any] | None = None
        while True:
            try:
                if lease is None:
                    status, lease = await self._request("get", "GET", path, ok=(200, 404))
                    if status == 404:
                        _, lease = await self._request(
                            "create",
                            "POST",
                            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                            body=self._new_lease(),
                        )
                renewed = dict(lease)
                spec = dict(renewed.get("spec") or {})
                spec["renewTime"] = _now()
                spec["holderIdentity"] = self.node_name
                renewed["spec"] = spec
                _, lease = await self._request("update", "PUT", path, body=renewed)
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, TimeoutError, RequestFailed):
                lease = None
            await asyncio.sleep(self.lease_interval)

    def _new_lease(self) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.node_name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.node_name,
                "leaseDurationSeconds": 40,
                "renewTime": _now(),
            },
        }

    async def _status_loop(self) -> None:
        path = f"/api/v1/nodes/{_q(self.node_name)}"
        while True:
            try:
                await self._request("get", "GET", path)
                patch = {
                    "status": {
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "True",
                                "reason": "KubeletReady",
                                "lastHeartbeatTime": _now(),
                            }
                        ]
                    }
                }
                await self._request(
                    "patch",
                    "PATCH",
                    f"{path}/status",
                    body=patch,
                    content_type="application/strategic-merge-patch+json",
                )
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, TimeoutError, RequestFailed):
                pass
            await asyncio.sleep(self.status_interval)


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def _references(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(``configmaps``|``secrets``, name) referenced by the pod's volumes and env."""
    found: list[tuple[str, str]] = []
    spec = pod.get("spec") or {}
    for volume in spec.get("volumes") or ():
        if (volume.get("configMap") or {}).get("name"):
            found.append(("configmaps", volume["configMap"]["name"]))
        if (volume.get("secret") or {}).get("secretName"):
            found.append(("secrets", volume["secret"]["secretName"]))
        for source in (volume.get("projected") or {}).get("sources") or ():
            if (source.get("configMap") or {}).get("name"):
                found.append(("configmaps", source["configMap"]["name"]))
            if (source.get("secret") or {}).get("name"):
                found.append(("secrets", source["secret"]["name"]))
    for container in spec.get("containers") or ():
        for env_from in container.get("envFrom") or ():
            if (env_from.get("configMapRef") or {}).get("name"):
                found.append(("configmaps", env_from["configMapRef"]["name"]))
            if (env_from.get("secretRef") or {}).get("name"):
                found.append(("secrets", env_from["secretRef"]["name"]))
    return sorted(set(found))
