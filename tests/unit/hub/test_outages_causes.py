"""Why an apiserver could not be used, as a named cause: a table of what the prober and the
proxy really meet (aiohttp's wrappers around the socket's errors, TLS errors, HTTP refusals)."""

from __future__ import annotations

import errno
import socket
import ssl

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from yurthub import unreachable
from yurthub.outages import causes
from yurthub.outages.causes import Cause

KEY = ConnectionKey("10.0.0.1", 6443, True, True, None, None, None)


def wrapped(inner: BaseException, outer: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


def cycle() -> BaseException:
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    return a


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        # refused: what the partition's "refuse" mode and a stopped apiserver give
        (aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "refused")), Cause.REFUSED),
        (ConnectionRefusedError(), Cause.REFUSED),
        (OSError(errno.ECONNREFUSED, "refused"), Cause.REFUSED),
        # reset: the "reset" mode (an RST on a live connection), a server closing silently
        (aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer"), Cause.RESET),
        (ConnectionResetError(), Cause.RESET),
        (BrokenPipeError(), Cause.RESET),
        (aiohttp.ServerDisconnectedError(), Cause.RESET),
        (aiohttp.ClientPayloadError("cut short"), Cause.RESET),
        # silent: the "blackhole" mode (the probe's asyncio.timeout), aiohttp's own timeouts
        (TimeoutError(), Cause.SILENT),
        (aiohttp.ServerTimeoutError("read"), Cause.SILENT),
        (aiohttp.ConnectionTimeoutError("connect"), Cause.SILENT),
        (OSError(errno.ETIMEDOUT, "timed out"), Cause.SILENT),
        # TLS
        (ssl.SSLError(1, "WRONG_VERSION_NUMBER"), Cause.TLS),
        (
            aiohttp.ClientConnectorCertificateError(
                KEY, ssl.SSLCertVerificationError(1, "unable to get local issuer certificate")
            ),
            Cause.TLS,
        ),
        (wrapped(ssl.SSLError(1, "tlsv13 alert certificate required"), RuntimeError()), Cause.TLS),
        # answers
        (
            unreachable.HttpRefusal("renewing the node lease", 401, "Unauthorized"),
            Cause.UNAUTHORIZED,
        ),
        (unreachable.HttpRefusal("renewing the node lease", 403, "forbidden"), Cause.HTTP),
        (unreachable.HttpRefusal("reading the node lease", 503), Cause.HTTP),
        # the rest
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), Cause.DNS),
        (
            aiohttp.ClientConnectorError(KEY, socket.gaierror(socket.EAI_NONAME, "unknown")),
            Cause.DNS,
        ),
        (OSError(errno.EHOSTUNREACH, "No route to host"), Cause.UNREACHABLE),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), Cause.UNREACHABLE),
        (ValueError("a malformed answer"), Cause.OTHER),
        (cycle(), Cause.OTHER),
        # the chain is searched: a wrapper says nothing, what it wraps does
        (wrapped(ConnectionRefusedError(), RuntimeError("wrapped")), Cause.REFUSED),
    ],
)
def test_of_error(error: BaseException, cause: Cause) -> None:
    assert causes.of_error(error) is cause


def test_every_cause_has_words_and_unknown_names_are_shown_as_they_are() -> None:
    assert set(causes.WORDS) == set(Cause)
    assert causes.words("refused") == "connection refused"
    assert causes.words("from-a-newer-hub") == "from-a-newer-hub"
