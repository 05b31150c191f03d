"""What a graceful stop waits for (``routing.finishes``): requests being answered, not watches
or upgraded streams."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.proxy import routing

UPGRADE = {"Connection": "Upgrade", "Upgrade": "websocket"}


@pytest.mark.parametrize(
    ("method", "path", "headers", "waited"),
    [
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", {}, True),
        ("PATCH", "/api/v1/nodes/n1/status", {}, True),
        ("GET", "/api/v1/pods", {}, True),
        ("GET", "/api/v1/namespaces/d/pods/p/log?follow=true", {}, True),
        ("GET", "/version", {}, True),
        ("GET", "/api/v1/pods?watch=true", {}, False),
        ("GET", "/api/v1/watch/pods", {}, False),
        (
            "GET",
            "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
            {},
            False,
        ),
        ("GET", "/api/v1/namespaces/d/pods/p/exec?command=sh", UPGRADE, False),
        ("POST", "/api/v1/namespaces/d/pods/p/portforward", UPGRADE, False),
    ],
)
def test_a_stop_waits_for_requests_being_answered_not_watches_or_upgrades(
    method: str, path: str, headers: dict[str, str], waited: bool
) -> None:
    raw, _, qs = path.partition("?")
    query = [(k, v) for k, _, v in (p.partition("=") for p in qs.split("&") if p)]
    info = requestinfo.classify(method, raw, query, CIMultiDict({"User-Agent": "k", **headers}))
    assert routing.finishes(info) is waited
