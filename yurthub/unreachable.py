"""Why an apiserver could not be asked, in words an operator acts on.

``describe(server, error)`` turns what a probe or a proxied request raised into one short
phrase: ``connection refused``, ``TLS handshake failed (WRONG_VERSION_NUMBER): is this an http://
port?``, ``no answer within 2 s``, ``HTTP 403: leases.coordination.k8s.io "n1" is forbidden``. The
health checker logs ``cannot reach <server>: <phrase>`` at INFO and keeps it as the server's
last error (``/v1/status``, ``/v1/readyz``).

Never ``str()`` of an aiohttp connector error: it prints the ``ssl.SSLContext`` object's repr
(``ssl:<ssl.SSLContext object at 0x...>``), which says nothing. No secrets reach these phrases:
only exception texts of the transport and a Status ``message`` the apiserver wrote, cut short.
"""

from __future__ import annotations

import errno
import socket
import ssl

import aiohttp

MAX_CHARS = 300
"""A phrase longer than this is cut (an apiserver's Status message can be long)."""


class HttpRefusal(Exception):
    """An apiserver answered, but not with success: ``HTTP <code>`` and its Status message."""

    def __init__(self, what: str, status: int, message: str = "") -> None:
        text = f"{what}: HTTP {status}"
        if message:
            text = f"{text}: {message}"
        super().__init__(text)
        self.status = status


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."


def _os_phrase(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return f"the name does not resolve ({error.strerror or error})"
    if isinstance(error, ConnectionRefusedError) or error.errno == errno.ECONNREFUSED:
        return "connection refused"
    if isinstance(error, ConnectionResetError) or error.errno == errno.ECONNRESET:
        return "connection reset"
    if error.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "no route to the host"
    if isinstance(error, TimeoutError) or error.errno == errno.ETIMEDOUT:
        return "the connection timed out"
    if error.strerror:
        return error.strerror[:1].lower() + error.strerror[1:]
    return _cut(str(error)) or type(error).__name__


def _tls_phrase(server: str, error: ssl.SSLError) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        why = error.verify_message or error.reason or "verification failed"
        return f"the server's certificate is not trusted ({why}): check the CA of --kubeconfig"
    reason = error.reason or type(error).__name__
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return f"TLS handshake failed ({reason}): is this an http:// port?"
    return f"TLS handshake failed ({reason})"


def describe(server: str, error: BaseException, *, timeout: float | None = None) -> str:
    """One phrase for why ``server`` could not be asked (pure: no I/O)."""
    if isinstance(error, HttpRefusal):
        return _cut(str(error))
    if isinstance(error, aiohttp.ClientConnectorCertificateError) and isinstance(
        error.certificate_error, ssl.SSLError
    ):
        return _tls_phrase(server, error.certificate_error)
    if isinstance(error, aiohttp.ClientConnectorSSLError) and isinstance(
        error.os_error, ssl.SSLError
    ):
        return _tls_phrase(server, error.os_error)
    if isinstance(error, ssl.SSLError):
        return _tls_phrase(server, error)
    if isinstance(error, aiohttp.ClientConnectorError):
        return _os_phrase(error.os_error)
    if isinstance(error, aiohttp.ServerDisconnectedError):
        if server.startswith("http://"):
            return "the server closed the connection without answering: is this an https:// port?"
        return "the server closed the connection without answering"
    if isinstance(error, TimeoutError | aiohttp.ServerTimeoutError):
        return f"no answer within {timeout:g} s" if timeout else "no answer in time"
    if isinstance(error, aiohttp.ClientResponseError):
        return _cut(f"HTTP {error.status} {error.message}")
    if isinstance(error, aiohttp.ClientPayloadError | aiohttp.ClientConnectionError):
        return _cut(f"the connection broke: {error}" if str(error) else "the connection broke")
    if isinstance(error, OSError):
        return _os_phrase(error)
    return _cut(str(error)) or type(error).__name__
