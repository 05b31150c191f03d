"""Which watches held open offline end as soon as the cloud is back (``routing.heals_at_once``):
the hub's own pool feeders' and kubelet's watch of its own Node; every other waits for its
moment within the heal spread."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.proxy import routing

KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"
FEEDER = "multiplexer-proxy-n1"


def classify(path: str, agent: str) -> requestinfo.RequestInfo:
    raw, _, qs = path.partition("?")
    query = [(k, v) for k, _, v in (p.partition("=") for p in qs.split("&") if p)]
    return requestinfo.classify("GET", raw, query, CIMultiDict({"User-Agent": agent}))


@pytest.mark.parametrize(
    ("path", "agent", "own", "at_once"),
    [
        ("/api/v1/nodes?watch=1&fieldSelector=metadata.name=n1", KUBELET, False, True),
        ("/api/v1/nodes?watch=1&fieldSelector=metadata.name==n1", KUBELET, False, True),
        (
            "/api/v1/nodes?watch=1&fieldSelector=metadata.name=n1",
            "hollow-kubelet/v1.37",
            False,
            True,
        ),
        # Another node, every node, or not a watch: the spread.
        ("/api/v1/nodes?watch=1&fieldSelector=metadata.name=n2", KUBELET, False, False),
        ("/api/v1/nodes?watch=1", KUBELET, False, False),
        ("/api/v1/nodes?fieldSelector=metadata.name=n1", KUBELET, False, False),
        ("/api/v1/pods?watch=1&fieldSelector=spec.nodeName=n1", KUBELET, False, False),
        ("/api/v1/nodes?watch=1&fieldSelector=metadata.name=n1", "kube-proxy/v1.37", False, False),
        # The hub's own feeders, over its own socket only.
        ("/api/v1/services?watch=1", FEEDER, True, True),
        ("/api/v1/services?watch=1", FEEDER, False, False),
        ("/api/v1/services?watch=1", "multiplexer-proxy-n2", True, False),
    ],
)
def test_heals_at_once(path: str, agent: str, own: bool, at_once: bool) -> None:
    info = classify(path, agent)
    assert routing.heals_at_once(info, "n1", own=own, multiplexer_ua=FEEDER) is at_once
