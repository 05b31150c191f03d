"""YurtHub's OTA API on the hub server port: ``GET /pods``, ``POST .../upgrade``, ``.../imagepull``.

The decisions are ``otadecisions``'s; this module reads and writes what they name: the Pods
kubelet read through the hub (the cache), the apiserver (a healthy one, with the hub's own
identity: this node's, which the Node authorizer lets read, delete and patch the status of
Pods bound to it), and the static Pod path (``ManifestWriter``).

Invariants:

- Only callers on this node: every handler refuses (403) a peer whose address is not loopback,
  read from the connection, never from a header. The proxy ports never serve these paths.
- Offline, an upgrade or image pull is refused (503) before anything is read: it needs the
  apiserver to delete or patch the Pod, and to read the new manifest.
- A static Pod's manifest is installed by a ``StaticPodUpgrader``. The default one
  (``ManifestWriter``) keeps the running manifest as a dot file beside it and swaps in the new
  one atomically (written to a dot file, fsynced, renamed over it, the directory fsynced):
  kubelet, which skips dot files, sees the old manifest or the new one, never a torn one.
  It replaces only the manifest of the static pod the mirror Pod is of (``metadata.name`` and
  ``namespace`` of the live file and of the new one, ``otadecisions.manifest_pod_problem``):
  a look-alike Pod (a Node owner is anyone's to set) and a ConfigMap beside it in another
  namespace cannot choose another static pod's file.
- Every answer but a success is a Kubernetes ``Status`` with YurtHub's code; one log line each.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import pathlib
import stat
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp
import orjson
from aiohttp import web

from yurthub import atomicfiles, balancing, health, otadecisions, settings
from yurthub.certs import apiclient
from yurthub.proxy import responses, upstream

log = logging.getLogger(__name__)

JSON = "application/json"
USER_AGENT = "edgehub/ota"

PodsSource = Callable[[], Awaitable[list[bytes]]]
"""The Pods kubelet read through the hub, as stored JSON (the cache's ``kubelet_pods``)."""


class UpgradeError(Exception):
    """A static Pod manifest could not be installed (the message says why)."""


@dataclasses.dataclass(frozen=True, slots=True)
class StaticPodUpgrade:
    namespace: str
    pod: str
    """The mirror Pod, ``<static_set>-<node>``."""
    static_set: str
    manifest: otadecisions.Manifest


class StaticPodUpgrader(Protocol):
    async def upgrade(self, request: StaticPodUpgrade) -> None:
        """Install ``request.manifest`` for kubelet; raises ``UpgradeError``."""


class ManifestWriter:
    """The default ``StaticPodUpgrader``: ``<name>.yaml`` in ``static_pod_path`` replaced by
    the new manifest, the one it replaces kept as ``.<name>.yaml.bak``."""

    def __init__(self, static_pod_path: pathlib.Path) -> None:
        self.static_pod_path = static_pod_path

    async def upgrade(self, request: StaticPodUpgrade) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._install, request)

    def _install(self, request: StaticPodUpgrade) -> None:
        manifest = request.manifest
        paths = otadecisions.manifest_paths(str(self.static_pod_path), manifest.name)
        try:
            live = pathlib.Path(paths.live)
            old = live.read_bytes()
            mode = stat.S_IMODE(live.stat().st_mode)
        except FileNotFoundError:
            raise UpgradeError(
                f"no manifest {paths.live}: the static pod does not run from --static-pod-path "
                f"{self.static_pod_path}"
            ) from None
        except OSError as e:
            raise UpgradeError(f"cannot read {paths.live}: {e.strerror or e}") from e
        for which, text in (
            (paths.live, old.decode("utf-8", "replace")),
            ("the new manifest", manifest.text),
        ):
            problem = otadecisions.manifest_pod_problem(
                text, request.namespace, request.static_set, which
            )
            if problem:
                raise UpgradeError(problem)
        try:
            atomicfiles.write(paths.backup, old, mode=mode, staging=f"{paths.backup}.writing")
            atomicfiles.write(paths.live, manifest.text.encode(), mode=mode, staging=paths.staging)
        except OSError as e:
            raise UpgradeError(f"cannot write {paths.live}: {e.strerror or e}") from e
        log.info("OTA: installed static pod manifest %s (the old one is %s)", live, paths.backup)


class _Failed(Exception):
    """The apiserver did not answer (transport) or answered an error (``status``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class OtaApi:
    def __init__(
        self,
        hub_settings: settings.HubSettings,
        client: upstream.Upstream,
        checker: health.HealthChecker,
        *,
        pods: PodsSource | None,
        upgrader: StaticPodUpgrader,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        """``pods``: None without a cache (the Pods are then listed from the apiserver)."""
        self._settings = hub_settings
        self._node = hub_settings.node_name
        self._client = client
        self._checker = checker
        self._balancer = balancing.Balancer(hub_settings.upstream.servers, settings.LbMode.RR)
        self._pods = pods
        self.upgrader = upgrader
        self._clock = clock

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/pods", self.pods)
        router.add_post("/openyurt.io/v1/namespaces/{ns}/pods/{pod}/upgrade", self.upgrade)
        router.add_post("/openyurt.io/v1/namespaces/{ns}/pods/{pod}/imagepull", self.imagepull)

    # --- handlers ---

    async def pods(self, request: web.Request) -> web.Response:
        refused = _refuse_peer(request)
        if refused is not None:
            return refused
        if self._pods is not None:
            items = await self._pods()
        elif not self._checker.any_healthy():
            return _failed(503, f"no disk cache, and {otadecisions.OFFLINE_MESSAGE}")
        else:
            try:
                listed = await self._call(
                    "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={self._node}"}
                )
            except _Failed as e:
                return _failed(500, f"Get pod list failed: {e.message}")
            found = listed.get("items") if isinstance(listed, dict) else None
            items = [orjson.dumps(pod) for pod in found or ()]
        return web.Response(body=otadecisions.pod_list(items), content_type=JSON)

    async def upgrade(self, request: web.Request) -> web.Response:
        target = await self._target_pod(request)
        if isinstance(target, web.Response):
            return target
        namespace, name, pod = target
        refusal = otadecisions.upgrade_refusal(pod, self._node)
        if refusal is None:
            kind = otadecisions.upgrade_kind(pod, self._node)
            if isinstance(kind, otadecisions.Refusal):
                refusal = kind
            elif kind.kind == otadecisions.DAEMON_SET:
                refusal = await self._delete(namespace, name, pod)
            else:
                refusal = await self._static(namespace, name, kind.static_set)
        if refusal is not None:
            return _failed(refusal.code, refusal.message)
        log.info("OTA: upgrading pod %s/%s", namespace, name)
        return web.Response(body=otadecisions.started_message(namespace, name), content_type=JSON)

    async def imagepull(self, request: web.Request) -> web.Response:
        target = await self._target_pod(request)
        if isinstance(target, web.Response):
            return target
        namespace, name, pod = target
        refusal = otadecisions.imagepull_refusal(pod, self._node)
        if refusal is not None:
            return _failed(refusal.code, refusal.message)
        patch = otadecisions.imagepull_patch(pod, self._clock())
        try:
            await self._call(
                "PATCH",
                f"{_pod_path(namespace, name)}/status",
                params={"fieldManager": otadecisions.FIELD_MANAGER},
                body=orjson.dumps(patch),
                content_type="application/merge-patch+json",
            )
        except _Failed as e:
            return _failed(500, f"Patch pod status for imagepull failed: {e.message}")
        log.info("OTA: image pre-pull requested for pod %s/%s", namespace, name)
        return web.Response(body=otadecisions.imagepull_message(namespace, name), content_type=JSON)

    # --- steps ---

    async def _target_pod(
        self, request: web.Request
    ) -> web.Response | tuple[str, str, dict[str, Any]]:
        """The pod an upgrade or image pull names (namespace, name, object), or the answer
        refusing the request: from a peer, while offline, or when the pod cannot be read."""
        refused = self._refuse(request)
        if refused is not None:
            return refused
        namespace, name = request.match_info["ns"], request.match_info["pod"]
        try:
            pod = await self._get_pod(namespace, name)
        except _Failed as e:
            return _failed(500, f"Get pod failed, {e.message}")
        return namespace, name, pod

    def _refuse(self, request: web.Request) -> web.Response | None:
        refused = _refuse_peer(request)
        if refused is not None:
            return refused
        if not self._checker.any_healthy():
            log.info("OTA: %s %s refused: no healthy apiserver", request.method, request.path)
            return _failed(503, otadecisions.OFFLINE_MESSAGE)
        return None

    async def _get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod = await self._call("GET", _pod_path(namespace, name))
        if not isinstance(pod, dict):
            raise _Failed(500, "the apiserver's answer is not a Pod")
        return pod

    async def _delete(
        self, namespace: str, name: str, pod: dict[str, Any]
    ) -> otadecisions.Refusal | None:
        """A DaemonSet Pod: delete it (only the Pod read: its uid as precondition)."""
        uid = (pod.get("metadata") or {}).get("uid")
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if isinstance(uid, str) and uid:
            options["preconditions"] = {"uid": uid}
        try:
            await self._call(
                "DELETE", _pod_path(namespace, name), body=orjson.dumps(options), content_type=JSON
            )
        except _Failed as e:
            return otadecisions.Refusal(500, f"Apply update failed: {e.message}")
        return None

    async def _static(
        self, namespace: str, name: str, static_set: str
    ) -> otadecisions.Refusal | None:
        """A YurtStaticSet's mirror Pod: install the manifest its ConfigMap holds."""
        cm_name = otadecisions.configmap_name(static_set)
        try:
            configmap = await self._call(
                "GET", f"/api/v1/namespaces/{_quote(namespace)}/configmaps/{_quote(cm_name)}"
            )
        except _Failed as e:
            if e.status == 404:
                return otadecisions.Refusal(
                    403, f"Configmap for static pod does not exist: {e.message}"
                )
            return otadecisions.Refusal(500, f"Static pod pre-check failed: {e.message}")
        found = otadecisions.manifest(configmap if isinstance(configmap, dict) else {})
        if isinstance(found, str):
            return otadecisions.Refusal(500, f"Apply update failed: {found}")
        try:
            await self.upgrader.upgrade(StaticPodUpgrade(namespace, name, static_set, found))
        except UpgradeError as e:
            return otadecisions.Refusal(500, f"Apply update failed: {e}")
        return None

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: bytes | None = None,
        content_type: str = "",
    ) -> Any:
        """One request to a healthy apiserver with the hub's identity; the decoded 2xx body.
        Raises ``_Failed`` (the apiserver's Status message, or the transport error)."""
        server = self._balancer.pick(self._checker.is_healthy)
        if server is None:
            raise _Failed(503, otadecisions.OFFLINE_MESSAGE)
        client = self._client
        headers = {"Accept": JSON, "User-Agent": USER_AGENT, **client.identity_headers()}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            async with asyncio.timeout(self._settings.heartbeat.timeout * 5):
                async with client.session.request(
                    method,
                    server + path,
                    params=params,
                    data=body,
                    headers=headers,
                    ssl=client.ssl_for(server, own_identity=True),
                ) as resp:
                    raw = await apiclient.read_whole(resp.content)
                    status = resp.status
        except (aiohttp.ClientError, OSError, TimeoutError, apiclient.TooLarge) as e:
            self._checker.report_transport_error(server)
            raise _Failed(502, f"{method} {path}: {e!r}") from e
        try:
            decoded = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            decoded = None
        if status >= 300:
            message = decoded.get("message") if isinstance(decoded, dict) else None
            raise _Failed(status, str(message) if message else f"HTTP {status}")
        return decoded


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{_quote(namespace)}/pods/{_quote(name)}"


def _failed(code: int, message: str) -> web.Response:
    return responses.status(code, message)


def _refuse_peer(request: web.Request) -> web.Response | None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    host = peer[0] if isinstance(peer, tuple) and peer else None
    problem = otadecisions.peer_refusal(host if isinstance(host, str) else None)
    if not problem:
        return None
    log.warning("OTA: %s %s refused: %s", request.method, request.path, problem)
    return _failed(403, problem)
