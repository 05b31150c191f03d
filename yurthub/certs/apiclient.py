"""A small apiserver client for the certificate manager: JSON get/post and one-object watches.

The hub's proxy path (``proxy/upstream.py``) is for proxied traffic and follows the hub's
current identity; bootstrapping needs other credentials (none, a join token, a bootstrap
kubeconfig, the client certificate being renewed), so each ``Client`` carries its own TLS
context and headers and tries ``--server-addr`` in order: the first server that answers at all
(any HTTP status) is the one used, a transport error moves to the next (YurtHub: "first
reachable server").

Bounded: one connection per server, a total timeout per request, bodies up to ``MAX_BODY``,
watch lines up to ``MAX_BODY``. Errors are ``Unreachable`` (no server answered) or
``ApiError`` (an HTTP error, with the Status message). Never logs credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

MAX_BODY = 4 << 20
USER_AGENT = "edgehub-certs"


class Unreachable(Exception):
    """No server could be reached (message lists each one's failure)."""


class ApiError(Exception):
    def __init__(self, server: str, status: int, message: str) -> None:
        super().__init__(f"{server}: HTTP {status}: {message}")
        self.server = server
        self.status = status
        self.message = message


def insecure_context() -> ssl.SSLContext:
    """Only for the anonymous cluster-info fetch, whose content is verified by its JWS."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def trusting(ca_pem: bytes) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=ca_pem.decode("ascii"))
    return ctx


class Client:
    def __init__(
        self,
        servers: Sequence[str],
        context: ssl.SSLContext,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 15.0,
        connect_timeout: float = 5.0,
    ) -> None:
        if not servers:
            raise ValueError("no servers")
        self.servers = tuple(servers)
        self._context = context
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit_per_host=2),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _ssl(self, server: str) -> ssl.SSLContext | bool:
        return False if server.startswith("http://") else self._context

    async def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """(server, decoded JSON answer) of the first server that answers."""
        assert self._session is not None, "use the client in 'async with'"
        failures: list[str] = []
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        for server in self.servers:
            try:
                async with asyncio.timeout(self._timeout):
                    async with self._session.request(
                        method, server + path, data=data, headers=headers, ssl=self._ssl(server)
                    ) as resp:
                        status = resp.status
                        try:
                            raw = await read_whole(resp.content)
                        except TooLarge as e:
                            raise ApiError(server, status, str(e)) from e
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                failures.append(f"{server}: {_why(e)}")
                continue
            decoded = _decode(raw)
            if status >= 400:
                message = decoded.get("message") if isinstance(decoded, dict) else None
                raise ApiError(server, status, str(message or raw[:200].decode("utf-8", "replace")))
            if not isinstance(decoded, dict):
                raise ApiError(server, status, "the answer is not a JSON object")
            return server, decoded
        raise Unreachable("; ".join(failures))

    async def get(self, path: str) -> dict[str, Any]:
        return (await self.request("GET", path))[1]

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return (await self.request("POST", path, body))[1]

    async def watch(
        self, server: str, path: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Events of a watch on ``server`` (``path`` carries its query); ends when the server
        ends it. Raises ``Unreachable``/``ApiError`` like ``request``."""
        assert self._session is not None, "use the client in 'async with'"
        sep = "&" if "?" in path else "?"
        url = f"{server}{path}{sep}watch=true&timeoutSeconds={timeout_seconds}"
        try:
            async with self._session.get(
                url,
                headers=self._headers,
                ssl=self._ssl(server),
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self._connect_timeout, sock_read=timeout_seconds + 30
                ),
                read_bufsize=1 << 16,
            ) as resp:
                if resp.status >= 400:
                    try:
                        raw = await read_whole(resp.content)
                    except TooLarge:
                        raw = b""
                    decoded = _decode(raw)
                    message = decoded.get("message") if isinstance(decoded, dict) else ""
                    raise ApiError(server, resp.status, str(message or "watch refused"))
                buffer = b""
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    if len(buffer) > MAX_BODY:
                        raise ApiError(server, resp.status, "watch event too large")
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        event = _decode(line)
                        if isinstance(event, dict):
                            yield event
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise Unreachable(f"{server}: {_why(e)}") from e


class TooLarge(Exception):
    pass


async def read_whole(content: aiohttp.StreamReader, limit: int = MAX_BODY) -> bytes:
    """The whole body, at most ``limit`` bytes (``TooLarge`` past it). ``read(n)`` alone
    returns whatever has arrived: with a real apiserver, often only the first piece."""
    body = bytearray()
    while chunk := await content.read(65536):
        body += chunk
        if len(body) > limit:
            raise TooLarge(f"answer larger than {limit} bytes")
    return bytes(body)


def _decode(raw: bytes) -> Any:
    with contextlib.suppress(ValueError):
        return json.loads(raw) if raw.strip() else None
    return None


def _why(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, aiohttp.ClientConnectorError):
        return f"cannot connect ({error.os_error.strerror or error.os_error})"
    if isinstance(error, aiohttp.ClientSSLError | ssl.SSLError):
        return f"TLS: {error}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
