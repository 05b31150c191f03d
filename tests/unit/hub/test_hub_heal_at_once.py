"""Which watches held open offline end as soon as the cloud is back (``routing.heals_at_once``):
the hub's own pool feeders' and kubelet's watch of its own Node; every other waits for its
moment within the heal spread. kubelet's watch of its own Node also gets the Node as the cloud
has it now first (``routing.heals_with_current``), when it is news (``localwatches.newer``)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.proxy import localwatches, routing

KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"
FEEDER = "multiplexer-proxy-n1"


def classify(path: str, agent: str) -> requestinfo.RequestInfo:
    raw, _, qs = path.partition("?")
    query = [(k, v) for k, _, v in (p.partition("=") for p in qs.split("&") if p)]
    return requestinfo.classify("GET", raw, query, CIMultiDict({"User-Agent": agent}))


MINE = "/api/v1/nodes?watch=1&fieldSelector=metadata.name=n1"


@pytest.mark.parametrize(
    ("path", "agent", "own", "at_once", "with_current"),
    [
        (MINE, KUBELET, False, True, True),
        ("/api/v1/nodes?watch=1&fieldSelector=metadata.name==n1", KUBELET, False, True, True),
        (MINE, "hollow-kubelet/v1.37", False, True, True),
        # Another node, every node, not a watch, another component: the spread, no read.
        ("/api/v1/nodes?watch=1&fieldSelector=metadata.name=n2", KUBELET, False, False, False),
        ("/api/v1/nodes?watch=1", KUBELET, False, False, False),
        ("/api/v1/nodes?fieldSelector=metadata.name=n1", KUBELET, False, False, False),
        ("/api/v1/nodes/n1", KUBELET, False, False, False),
        ("/api/v1/pods?watch=1&fieldSelector=spec.nodeName=n1", KUBELET, False, False, False),
        (MINE, "kube-proxy/v1.37", False, False, False),
        # Over the hub's own socket: only its own feeders end at once, and read nothing
        # (their watches select many objects).
        (MINE, KUBELET, True, False, False),
        ("/api/v1/services?watch=1", FEEDER, True, True, False),
        ("/api/v1/services?watch=1", FEEDER, False, False, False),
        ("/api/v1/services?watch=1", "multiplexer-proxy-n2", True, False, False),
    ],
)
def test_which_held_watches_end_at_once_and_which_get_their_object(
    path: str, agent: str, own: bool, at_once: bool, with_current: bool
) -> None:
    info = classify(path, agent)
    assert routing.heals_at_once(info, "n1", own=own, multiplexer_ua=FEEDER) is at_once
    assert routing.heals_with_current(info, "n1", own=own) is with_current


@pytest.mark.parametrize(
    ("fetched", "held", "news"),
    [
        ("120", "100", True),
        ("100", "100", False),  # nothing happened to it since
        ("99", "100", False),  # older than what the client has: never sent back in time
        ("120", "", False),
        ("", "100", False),
        ("12a", "100", False),
        ("1000000000000000000000", "999", True),
    ],
)
def test_only_news_is_sent_at_the_heal(fetched: str, held: str, news: bool) -> None:
    assert localwatches.newer(fetched, held) is news


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"kind":"Node","metadata":{"name":"n1","resourceVersion":"7"}}', ("n1", "7")),
        (b'{"kind":"Node","metadata":{"name":"n1"}}', None),
        (b'{"kind":"Node","metadata":{"name":"","resourceVersion":"7"}}', None),
        (b'{"kind":"Node","metadata":{"name":1,"resourceVersion":"7"}}', None),
        (b'{"kind":"Status","metadata":{}}', None),
        (b"[]", None),
        (b"not json", None),
    ],
)
def test_the_current_object_is_named_and_versioned(
    body: bytes, expected: tuple[str, str] | None
) -> None:
    assert localwatches.current_version(body) == expected
