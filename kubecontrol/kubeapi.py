"""The only door to the apiserver of the agent and the managers: a thin adapter over one
kubernetes_asyncio ApiClient.

Everything inward of this module sees plain JSON dicts and the small error
hierarchy below; no kubernetes_asyncio model or exception leaks out. The
adapter speaks raw REST paths so every resource (custom or built-in, and
subresources such as a CSR's ``approval``) shares one code path, and the hub's
proxy, which the agent may be pointed at, sees ordinary list/watch/get/put
requests it can cache.

Invariants:
  * One ApiClient per process, created by ``connect`` and closed by its owner.
  * Every request has a timeout; watch streams are read line by line with a
    hard line-size limit, never buffered whole.
  * Errors: 404 -> ``NotFound``, 409 -> ``Conflict``, 410 -> ``Gone``,
    transport failures / 5xx / 429 -> ``Unavailable`` (retryable), anything
    else -> ``KubeError``. Messages never include response bodies; a refusal's
    (400/403/409/422) Status ``message`` is kept apart in ``KubeError.detail``
    (bounded), for callers that tell a user why the apiserver said no.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import exceptions as k8s_exceptions

from kubecontrol import credentials, scratchfiles

logger = logging.getLogger(__name__)

# Largest watch event line accepted: etcd's default request limit is 1.5 MiB.
MAX_EVENT_BYTES = 4 * 1024 * 1024

JSONObject = dict[str, Any]


# Largest list page read as bytes (``list_pages`` with ``decode``): 500 objects of 1 MiB each.
MAX_PAGE_BYTES = 512 * 1024 * 1024

# A paginated list longer than this many pages is refused (5 million objects at 500 a page):
# an apiserver (or proxy) that hands out continue tokens for ever must not keep us listing.
MAX_LIST_PAGES = 10_000

# A Status message longer than this is cut: it ends up in Events and log lines.
MAX_DETAIL_CHARS = 1024


class KubeError(Exception):
    def __init__(self, message: str, status: int = 0, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail
        """The apiserver's own explanation (``Status.message``) of a refusal, else ``""``."""


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Gone(KubeError):
    """The resourceVersion is too old: relist."""


class Unavailable(KubeError, ConnectionError):
    """The apiserver could not be reached or asked us to come back later."""


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource is not None:
                base += f"/{subresource}"
        return base

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


CONFIGMAPS = Resource("", "v1", "configmaps")
SECRETS = Resource("", "v1", "secrets")
EVENTS = Resource("", "v1", "events")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
CERTIFICATE_SIGNING_REQUESTS = Resource("certificates.k8s.io", "v1", "certificatesigningrequests")
NODES = Resource("", "v1", "nodes")
PODS = Resource("", "v1", "pods")
SERVICES = Resource("", "v1", "services")
JOBS = Resource("batch", "v1", "jobs")


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[JSONObject]
    resource_version: str
    continue_token: str = ""
    """A page's ``metadata.continue`` ("" on the last page, or a whole list)."""


@dataclasses.dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: JSONObject


async def connect(
    url: str | None,
    kubeconfig: Path | None,
    user_agent: str,
    service_account: credentials.ServiceAccount | None = None,
) -> k8s_client.ApiClient:
    """An ApiClient for ``url`` (e.g. the hub's proxy) and/or credentials.

    Credentials come from the kubeconfig, else from the ServiceAccount; ``url``
    replaces their server. With only ``url``, requests are anonymous (a local
    proxy authenticates on our behalf).
    """
    configuration = k8s_client.Configuration()
    if kubeconfig is not None:
        # Its inline key is written to files for ssl to load: they last until the client is
        # made, not until the process exits (``scratchfiles``).
        with scratchfiles.scratch_directory() as scratch:
            try:
                await k8s_config.load_kube_config(
                    config_file=str(kubeconfig),
                    client_configuration=configuration,
                    temp_file_path=scratch,
                )
            except (OSError, k8s_config.ConfigException, ValueError, yaml.YAMLError) as e:
                raise KubeError(f"cannot load kubeconfig {kubeconfig}: {_first_line(e)}") from e
            return _client(configuration, url, user_agent)
    if service_account is not None:
        if url is None and service_account.server is None:
            raise KubeError("in a Pod without KUBERNETES_SERVICE_HOST: give the apiserver URL")
        token = _ServiceAccountToken(service_account)
        await asyncio.to_thread(token.read)
        configuration.host = service_account.server or ""
        configuration.ssl_ca_cert = str(service_account.directory / "ca.crt")
        configuration.api_key["BearerToken"] = token.value
        configuration.refresh_api_key_hook = token.refresh
    elif url is None:
        raise KubeError("neither an apiserver URL nor a kubeconfig was given")
    return _client(configuration, url, user_agent)


def _client(
    configuration: k8s_client.Configuration, url: str | None, user_agent: str
) -> k8s_client.ApiClient:
    """The ApiClient (its TLS context built now, from the files the configuration names)."""
    if url is not None:
        configuration.host = url.rstrip("/")
    api_client = k8s_client.ApiClient(configuration)
    api_client.user_agent = user_agent
    return api_client


class _ServiceAccountToken:
    """The projected ServiceAccount token, re-read every ``token_reload`` seconds.

    ``refresh`` runs as kubernetes_asyncio's ``refresh_api_key_hook``, synchronously before a
    request: the re-read is one small tmpfs file once a minute, so it stays on the loop. A
    failed re-read keeps the previous token (it is still valid for a while) and logs why.
    """

    def __init__(self, account: credentials.ServiceAccount) -> None:
        self._account = account
        self._path = account.directory / "token"
        self.value = ""
        self._read_at = 0.0

    def read(self) -> None:
        try:
            token = self._path.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise KubeError(f"cannot read the ServiceAccount token {self._path}: {e}") from e
        if not token:
            raise KubeError(f"the ServiceAccount token {self._path} is empty")
        self.value = f"Bearer {token}"
        self._read_at = time.monotonic()

    def refresh(self, configuration: Any) -> None:
        if time.monotonic() - self._read_at < self._account.token_reload:
            return
        try:
            self.read()
        except KubeError as e:
            logger.warning("keeping the previous ServiceAccount token: %s", e)
            self._read_at = time.monotonic()
            return
        configuration.api_key["BearerToken"] = self.value


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _status_message(e: k8s_exceptions.ApiException) -> str:
    """``message`` of the Status body of a refusal (why the apiserver said no), bounded."""
    body = getattr(e, "body", None)
    if not body or not isinstance(body, str | bytes) or len(body) > 1 << 20:
        return ""
    try:
        status = json.loads(body)
    except ValueError:
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return message[:MAX_DETAIL_CHARS] if isinstance(message, str) else ""


def _error(e: BaseException, what: str) -> KubeError:
    if isinstance(e, k8s_exceptions.ApiException):
        status = int(e.status or 0)
        message = f"{what}: HTTP {status} {e.reason or ''}".strip()
        detail = _status_message(e) if status in (400, 403, 409, 422) else ""
        if status == 404:
            return NotFound(message, status)
        if status == 409:
            return Conflict(message, status, detail)
        if status == 410:
            return Gone(message, status)
        if status == 429 or status >= 500 or status == 0:
            # Why it is unavailable is in the Status (through a hub: "the cloud is unreachable
            # and ...", "hub is not ready: ..."): a bare "HTTP 503" tells the operator nothing.
            why = _status_message(e)
            return Unavailable(f"{message}: {why}" if why else message, status, why)
        return KubeError(message, status, detail)
    return Unavailable(f"{what}: {type(e).__name__}: {e}")


_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


class KubeApi:
    """JSON-in, JSON-out access to the few resources the agent uses."""

    def __init__(self, api_client: k8s_client.ApiClient, request_timeout: float = 30.0) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> JSONObject:
        what = f"{method} {path}"
        try:
            result = await self.api_client.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=dict(body) if body is not None else None,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=self.request_timeout,
            )
        except (k8s_exceptions.ApiException, *_TRANSPORT_ERRORS) as e:
            raise _error(e, what) from e
        if not isinstance(result, dict):
            raise KubeError(f"{what}: response is not a JSON object")
        return result

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        """All of ``resource`` (in ``namespace``, or every namespace) matching the selectors."""
        query = _selectors(label_selector, field_selector)
        result = await self._call("GET", resource.path(namespace), query=query)
        items = result.get("items") or []
        rv = str((result.get("metadata") or {}).get("resourceVersion") or "")
        return ObjectList([i for i in items if isinstance(i, dict)], rv)

    async def list_pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        decode: Callable[[bytes], ObjectList] | None = None,
    ) -> AsyncIterator[ObjectList]:
        """The same list as ``list``, in pages of at most ``limit`` objects (``limit`` and
        ``continue``, as client-go's pager), so a caller that keeps less than whole objects
        never holds the whole answer at once. Every page carries the list's resourceVersion
        (the snapshot the first page pinned). ``decode`` turns a page's body (bytes) into the
        page (``decoding.Decoder.page``: only the fields a shape keeps); without it, pages are
        JSON dicts. ``Gone`` when the continue token expired meanwhile (etcd compacted it):
        list again from the start."""
        if limit < 1:
            raise ValueError("a page holds at least one object")
        selectors = _selectors(label_selector, field_selector)
        path = resource.path(namespace)
        token = ""
        pages = 0
        while True:
            query = [*selectors, ("limit", str(limit))]
            if token:
                query.append(("continue", token))
            if decode is not None:
                page = decode(await self._get_raw(path, query))
            else:
                result = await self._call("GET", path, query=query)
                meta = result.get("metadata") or {}
                items = result.get("items") or []
                page = ObjectList(
                    [i for i in items if isinstance(i, dict)],
                    str(meta.get("resourceVersion") or ""),
                    str(meta.get("continue") or ""),
                )
                del result, items
            token = page.continue_token
            pages += 1
            yield page
            del page
            if not token:
                return
            if pages >= MAX_LIST_PAGES:
                raise KubeError(f"list {path}: more than {pages} pages")

    async def _get_raw(self, path: str, query: Sequence[tuple[str, str]]) -> bytes:
        """The body of a GET as bytes (bounded by ``MAX_PAGE_BYTES``), for a decoder of the
        caller's; errors as ``_call``'s."""
        what = f"GET {path}"
        try:
            response = await self.api_client.call_api(
                path,
                "GET",
                query_params=list(query),
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        except (k8s_exceptions.ApiException, *_TRANSPORT_ERRORS) as e:
            raise _error(e, what) from e
        try:
            if response.status != 200:
                exc = k8s_exceptions.ApiException(status=response.status, reason=response.reason)
                exc.body = await response.content.read(MAX_DETAIL_CHARS * 4)
                raise _error(exc, what)
            body = bytearray()
            async for chunk in response.content.iter_any():
                body.extend(chunk)
                if len(body) > MAX_PAGE_BYTES:
                    raise KubeError(f"{what}: answer larger than {MAX_PAGE_BYTES} bytes")
            return bytes(body)
        except _TRANSPORT_ERRORS as e:
            raise _error(e, what) from e
        finally:
            response.release()

    async def get(self, resource: Resource, namespace: str, name: str) -> JSONObject:
        return await self._call("GET", resource.path(namespace, name))

    async def get_or_none(self, resource: Resource, namespace: str, name: str) -> JSONObject | None:
        try:
            return await self.get(resource, namespace, name)
        except NotFound:
            return None

    async def create(
        self,
        resource: Resource,
        namespace: str,
        body: Mapping[str, Any],
        *,
        dry_run: bool = False,
        strict: bool = False,
    ) -> JSONObject:
        """POST; ``dry_run``: validated and admitted but never stored; ``strict``: unknown or
        duplicate fields are a 400 (``fieldValidation=Strict``) instead of dropped."""
        query = []
        if dry_run:
            query.append(("dryRun", "All"))
        if strict:
            query.append(("fieldValidation", "Strict"))
        return await self._call("POST", resource.path(namespace), query=query, body=body)

    async def replace(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> JSONObject:
        """PUT (of the object, or of ``subresource`` such as a CSR's ``approval``); a
        ``metadata.resourceVersion`` in ``body`` makes it conditional (409 on a race)."""
        return await self._call("PUT", resource.path(namespace, name, subresource), body=body)

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> JSONObject:
        """A JSON merge patch (RFC 7386) of the object or ``subresource``: only the fields
        ``body`` names change (a list is replaced whole, ``None`` removes a key). A
        ``metadata.resourceVersion`` in ``body`` makes it conditional: 409 when the object
        changed since (the apiserver compares the patched object's resourceVersion)."""
        return await self._call(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=body,
            content_type="application/merge-patch+json",
        )

    async def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = None,
    ) -> None:
        """DELETE with optional preconditions (409 when the object changed meanwhile) and
        ``propagation`` (``Background``/``Foreground``/``Orphan``; batch/v1 Jobs orphan their
        pods unless told otherwise)."""
        preconditions: dict[str, str] = {}
        if uid:
            preconditions["uid"] = uid
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if preconditions:
            body["preconditions"] = preconditions
        if propagation:
            body["propagationPolicy"] = propagation
        await self._call("DELETE", resource.path(namespace, name), body=body)

    async def get_configmap(self, namespace: str, name: str) -> JSONObject | None:
        return await self.get_or_none(CONFIGMAPS, namespace, name)

    async def get_secret(self, namespace: str, name: str) -> JSONObject | None:
        return await self.get_or_none(SECRETS, namespace, name)

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        timeout_seconds: int,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        decode: Callable[[bytes, str], WatchEvent | None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """One watch request from ``resource_version``; ends when the server closes it.
        ``decode`` parses each event line (``decoding.Decoder.event``); else ``parse_event``.

        Raises ``Gone`` when the server reports 410 (the caller relists).
        """
        path = resource.path(namespace)
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
            *_selectors(label_selector, field_selector),
        ]
        try:
            response = await self.api_client.call_api(
                path,
                "GET",
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(
                    connect=self.request_timeout,
                    sock_connect=self.request_timeout,
                    sock_read=timeout_seconds + self.request_timeout,
                ),
            )
        except (k8s_exceptions.ApiException, *_TRANSPORT_ERRORS) as e:
            raise _error(e, f"watch {path}") from e
        try:
            if response.status != 200:
                exc = k8s_exceptions.ApiException(status=response.status, reason=response.reason)
                # Its Status says why (bounded; what has arrived of it is enough for a message).
                exc.body = await response.content.read(MAX_DETAIL_CHARS * 4)
                raise _error(exc, f"watch {path}")
            parse = decode or parse_event
            async for line in _lines(response.content):
                event = parse(line, path)
                if event is not None:
                    yield event
        except _TRANSPORT_ERRORS as e:
            raise _error(e, f"watch {path}") from e
        finally:
            response.release()


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    buffer = bytearray()
    async for chunk in stream.iter_any():
        buffer.extend(chunk)
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            if line.strip():
                yield line
        if len(buffer) > MAX_EVENT_BYTES:
            raise KubeError(f"watch event larger than {MAX_EVENT_BYTES} bytes")
    if buffer.strip():
        yield bytes(buffer)


def parse_event(line: bytes, path: str) -> WatchEvent | None:
    """One watch event line as JSON; ``Gone`` or another ``KubeError`` for an ERROR event,
    None for a type this client does not know."""
    try:
        raw = json.loads(line)
    except ValueError as e:
        raise Unavailable(f"watch {path}: malformed event") from e
    kind = raw.get("type") if isinstance(raw, dict) else None
    obj = raw.get("object") if isinstance(raw, dict) else None
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise Unavailable(f"watch {path}: malformed event")
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        if code == 410:
            raise Gone(f"watch {path}: resourceVersion too old", 410)
        exc = k8s_exceptions.ApiException(status=code, reason=str(obj.get("reason") or ""))
        exc.body = json.dumps(obj).encode()
        raise _error(exc, f"watch {path}")
    if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        logger.debug("ignoring watch event type %s on %s", kind, path)
        return None
    return WatchEvent(kind, obj)


def key_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def resource_version_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
