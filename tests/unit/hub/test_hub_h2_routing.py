"""Which forwarded requests may go over the hub's HTTP/2 connections (``remote.over_h2``)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.proxy import remote


def info(method: str, path: str, **query: str) -> requestinfo.RequestInfo:
    return requestinfo.classify(method, path, query, CIMultiDict())


WATCH = info("GET", "/api/v1/namespaces/d/configmaps", watch="true")


def test_a_watch_with_the_hubs_identity_goes_over_http2() -> None:
    assert remote.over_h2(WATCH, "GET", own_identity=True, lane=False, body=None)


@pytest.mark.parametrize(
    ("request_info", "method", "own_identity", "lane", "body", "why"),
    [
        (WATCH, "GET", False, False, None, "a client's token: its 401 would close the connection"),
        (WATCH, "GET", True, True, None, "the heartbeat lane keeps its own connections"),
        (info("GET", "/api/v1/namespaces/d/configmaps"), "GET", True, False, None, "a list"),
        (info("GET", "/api/v1/namespaces/d/configmaps/c"), "GET", True, False, None, "a get"),
        (info("GET", "/api/v1/namespaces/d/pods/p/log", follow="true"), "GET", True, False,
         None, "a log stream: long-running, no watch"),
        (info("PATCH", "/api/v1/nodes/n"), "PATCH", True, False, b"{}", "a write"),
    ],
)  # fmt: skip
def test_everything_else_goes_over_http11(
    request_info: requestinfo.RequestInfo,
    method: str,
    own_identity: bool,
    lane: bool,
    body: object,
    why: str,
) -> None:
    assert not remote.over_h2(
        request_info, method, own_identity=own_identity, lane=lane, body=body
    ), why
