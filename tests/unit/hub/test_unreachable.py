"""``unreachable.describe``: why an apiserver could not be asked, in words (never the repr of an
``ssl.SSLContext``)."""

from __future__ import annotations

import socket
import ssl

import aiohttp
import pytest

from yurthub import unreachable

HTTPS = "https://10.0.0.1:6443"
HTTP = "http://10.0.0.1:6443"


def _connector(error: OSError) -> aiohttp.ClientConnectorError:
    return aiohttp.ClientConnectorError(None, error)  # type: ignore[arg-type]


def _ssl_error(reason: str) -> ssl.SSLError:
    e = ssl.SSLError(1, f"[SSL: {reason}] {reason.lower()}")
    e.reason = reason
    return e


def _verify_error() -> ssl.SSLCertVerificationError:
    e = ssl.SSLCertVerificationError(1, "certificate verify failed")
    e.verify_message = "unable to get local issuer certificate"
    return e


@pytest.mark.parametrize(
    ("server", "error", "phrase"),
    [
        (HTTPS, _connector(ConnectionRefusedError(111, "Connection refused")),
         "connection refused"),
        (HTTPS, _connector(socket.gaierror(-2, "Name or service not known")),
         "the name does not resolve (Name or service not known)"),
        (HTTPS, _connector(OSError(113, "No route to host")), "no route to the host"),
        (HTTPS, _connector(ConnectionResetError(104, "Connection reset")), "connection reset"),
        (HTTPS, aiohttp.ClientConnectorSSLError(None, _ssl_error("WRONG_VERSION_NUMBER")),  # type: ignore[arg-type]
         "TLS handshake failed (WRONG_VERSION_NUMBER): is this an http:// port?"),
        (HTTPS, aiohttp.ClientConnectorCertificateError(None, _verify_error()),  # type: ignore[arg-type]
         "the server's certificate is not trusted (unable to get local issuer certificate): "
         "check the CA of --kubeconfig"),
        (HTTP, aiohttp.ServerDisconnectedError(),
         "the server closed the connection without answering: is this an https:// port?"),
        (HTTPS, aiohttp.ServerDisconnectedError(),
         "the server closed the connection without answering"),
        (HTTPS, TimeoutError(), "no answer within 2 s"),
        (HTTPS, unreachable.HttpRefusal("renewing the node lease", 403, 'leases "n1" is forbidden'),
         'renewing the node lease: HTTP 403: leases "n1" is forbidden'),
        (HTTPS, unreachable.HttpRefusal("x", 500, "y" * 1000), "x: HTTP 500: " + "y" * 284 + "..."),
    ],
)  # fmt: skip
def test_describe(server: str, error: BaseException, phrase: str) -> None:
    described = unreachable.describe(server, error, timeout=2)
    assert described == phrase
    assert "SSLContext" not in described and "0x" not in described
