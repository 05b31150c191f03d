"""Why the hub could not use an apiserver, as one of a few named causes.

PURE: an exception (or what the prober decided without asking the server) in, a ``Cause`` out;
no I/O, no clock. ``unreachable.describe`` says the same thing in words for a log line; this
says it as a value an outage record, an Event and a metric label can hold (a closed set, so
bounded):

- ``refused``: the connection was refused (nothing listens: the apiserver is down, a firewall
  rejects);
- ``reset``: the connection was reset or closed without an answer (a middlebox dropping the
  flow, an apiserver restarting; with TLS 1.3 also a client certificate the server refused
  after the handshake: it looks the same on the wire);
- ``silent``: no answer in time (a blackholed route, a hung apiserver: the probe's timeout or a
  request's header deadline);
- ``tls``: the TLS handshake failed (an untrusted server certificate, a refused client
  certificate, an http:// port);
- ``unauthorized``: HTTP 401, the apiserver did not accept the hub's credentials;
- ``http``: the apiserver answered, with another error (403, 5xx, an unusable answer);
- ``dns``: the server's name does not resolve;
- ``unreachable``: no route to the host or network;
- ``kubelet``: the hub stopped renewing the node lease itself because kubelet went silent
  (``--kubelet-health-grace-period``): the link may be fine, the node is not;
- ``no-identity``: the hub has no credentials yet (still joining): counted among an outage's
  failed probes, never the cause one begins with (``recording``: a join is no outage);
- ``other``: anything else.

The exception's chain (``__cause__``, ``__context__``, aiohttp's ``os_error``) is searched,
most specific first, so a connector error wrapping ``ConnectionRefusedError`` is ``refused``.
"""

from __future__ import annotations

import enum
import errno
import socket
import ssl

import aiohttp


class Cause(enum.StrEnum):
    REFUSED = "refused"
    RESET = "reset"
    SILENT = "silent"
    TLS = "tls"
    UNAUTHORIZED = "unauthorized"
    HTTP = "http"
    DNS = "dns"
    UNREACHABLE = "unreachable"
    KUBELET = "kubelet"
    NO_IDENTITY = "no-identity"
    OTHER = "other"


WORDS = {
    Cause.REFUSED: "connection refused",
    Cause.RESET: "connection reset or closed without an answer",
    Cause.SILENT: "no answer in time (a silent link)",
    Cause.TLS: "TLS handshake failed",
    Cause.UNAUTHORIZED: "401 Unauthorized (the hub's credentials were not accepted)",
    Cause.HTTP: "the apiserver answered with an error",
    Cause.DNS: "the server's name does not resolve",
    Cause.UNREACHABLE: "no route to the apiserver",
    Cause.KUBELET: "kubelet went silent: the hub stopped renewing the node lease",
    Cause.NO_IDENTITY: "the hub had no identity yet",
    Cause.OTHER: "another failure",
}
"""Each cause in words (an Event's message, ``edgehub status --history``)."""

_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})
_UNREACHABLE_ERRNOS = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN})
_CHAIN_LIMIT = 16


def words(cause: str) -> str:
    """``WORDS`` of a cause read back from storage (an unknown name is shown as it is)."""
    try:
        return WORDS[Cause(cause)]
    except ValueError:
        return cause


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and what it wraps, outermost first (bounded, cycles cut)."""
    out: list[BaseException] = []
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    while todo and len(out) < _CHAIN_LIMIT:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        out.append(current)
        for inner in (
            getattr(current, "os_error", None),
            getattr(current, "certificate_error", None),
            current.__cause__,
            current.__context__,
        ):
            if isinstance(inner, BaseException):
                todo.append(inner)
    return out


def _one(error: BaseException) -> Cause | None:
    status = getattr(error, "status", None)
    if isinstance(status, int) and not isinstance(error, OSError):
        # ``unreachable.HttpRefusal`` and aiohttp's response errors: the server answered.
        return Cause.UNAUTHORIZED if status == 401 else Cause.HTTP
    if isinstance(error, ssl.SSLError):
        return Cause.TLS
    if isinstance(error, socket.gaierror):
        return Cause.DNS
    if isinstance(error, ConnectionRefusedError):
        return Cause.REFUSED
    if isinstance(error, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return Cause.RESET
    if isinstance(error, TimeoutError):
        return Cause.SILENT
    if isinstance(error, OSError) and error.errno is not None:
        if error.errno == errno.ECONNREFUSED:
            return Cause.REFUSED
        if error.errno in _RESET_ERRNOS:
            return Cause.RESET
        if error.errno in _UNREACHABLE_ERRNOS:
            return Cause.UNREACHABLE
        if error.errno == errno.ETIMEDOUT:
            return Cause.SILENT
    if isinstance(error, aiohttp.ServerDisconnectedError):
        return Cause.RESET
    if isinstance(error, aiohttp.ClientPayloadError):
        return Cause.RESET
    return None


def of_error(error: BaseException) -> Cause:
    """The cause of a failed probe or request that raised ``error``."""
    for inner in _chain(error):
        cause = _one(inner)
        if cause is not None:
            return cause
    return Cause.OTHER
