"""Who listed what, from kube-apiserver's audit log (``fleetaudit``)."""

from __future__ import annotations

import json
import pathlib

import pytest

from yurthub.testing import fleetaudit


def event(
    uri: str,
    *,
    verb: str = "list",
    user: str = "system:node:127.10.0.1",
    agent: str = "kubelet/v1.37.2 (linux/amd64)",
    resource: str = "pods",
    stage: str = "ResponseComplete",
    code: int = 200,
    received: str | None = None,
) -> bytes:
    extra = {} if received is None else {"requestReceivedTimestamp": received}
    return json.dumps(
        {
            **extra,
            "kind": "Event",
            "stage": stage,
            "verb": verb,
            "requestURI": uri,
            "user": {"username": user},
            "userAgent": agent,
            "objectRef": {"resource": resource},
            "responseStatus": {"code": code},
        }
    ).encode()


@pytest.mark.parametrize(
    ("uri", "version"),
    [
        ("/api/v1/pods", ""),
        ("/api/v1/pods?resourceVersion=", ""),
        ("/api/v1/pods?resourceVersion=0&limit=500", "0"),
        ("/api/v1/pods?fieldSelector=spec.nodeName%3Dn&resourceVersion=12345", "other"),
    ],
)
def test_lists_are_classified_by_resource_version(uri: str, version: str) -> None:
    call = fleetaudit.parse(event(uri))
    assert call is not None
    assert (call.version, call.component, call.resource, call.code) == (
        version,
        "kubelet",
        "pods",
        200,
    )


@pytest.mark.parametrize(
    ("uri", "version"),
    [
        (
            "/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
            "stream",
        ),
        ("/api/v1/pods?watch=true&resourceVersion=12345&allowWatchBookmarks=true", "resumed"),
        ("/api/v1/pods?watch=true", "new"),
        ("/api/v1/pods?watch=true&resourceVersion=0", "new"),
    ],
)
def test_watches_are_counted_when_they_start(uri: str, version: str) -> None:
    call = fleetaudit.parse(event(uri, verb="watch", stage="ResponseStarted"))
    assert call is not None
    assert (call.verb, call.version) == ("watch", version)
    assert fleetaudit.parse(event(uri, verb="watch")) is None  # its end: counted already


@pytest.mark.parametrize(
    ("received", "at"),
    [
        ("2026-12-06T12:08:26.500000Z", 1796558906.5),
        ("not a time", 0.0),
        (None, 0.0),
    ],
)
def test_a_call_carries_when_the_apiserver_received_it(received: str | None, at: float) -> None:
    call = fleetaudit.parse(
        event("/api/v1/pods?watch=true", verb="watch", stage="ResponseStarted", received=received)
    )
    assert call is not None and call.at == at


@pytest.mark.parametrize(
    "line",
    [
        event("/api/v1/pods", stage="ResponseStarted"),
        event("/api/v1/pods/p", verb="get"),
        event("/api/v1/nodes/n1/status", verb="patch"),  # recorded for the node's story
        b"not json",
        b"[1, 2]",
    ],
)
def test_other_lines_are_not_counted(line: bytes) -> None:
    assert fleetaudit.parse(line) is None


def test_summarize_counts_the_given_users_only() -> None:
    mux = "multiplexer-proxy-127.10.0.1/v0.1.0"
    calls = [
        fleetaudit.parse(event("/api/v1/pods")),
        fleetaudit.parse(event("/api/v1/services?resourceVersion=0", resource="services",
                               agent=mux)),
        fleetaudit.parse(event("/api/v1/nodes?resourceVersion=9", resource="nodes")),
        fleetaudit.parse(event("/api/v1/secrets?watch=true&sendInitialEvents=true", verb="watch",
                               stage="ResponseStarted", resource="secrets")),
        fleetaudit.parse(event("/api/v1/secrets?watch=true&resourceVersion=7", verb="watch",
                               stage="ResponseStarted", resource="secrets")),
        fleetaudit.parse(event("/api/v1/pods", user="system:kube-controller-manager",
                               agent="kube-controller-manager/v1.37.2")),
    ]  # fmt: skip
    found = fleetaudit.summarize([c for c in calls if c], frozenset({"system:node:127.10.0.1"}))
    assert found.by_version == {"": 1, "0": 1, "other": 1, "stream": 1, "resumed": 1}
    assert (found.relists, found.lists, found.resumed, found.total) == (3, 3, 1, 5)
    # What asked everything anew, by whom and for what.
    assert found.by_component == {"kubelet": 2, "multiplexer-proxy": 1}
    assert found.by_resource == {"pods": 1, "services": 1, "secrets": 1}
    assert fleetaudit.summarize([c for c in calls if c]).total == 6


def test_read_from_an_offset_reads_only_whole_new_lines(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "audit.log"
    log.write_bytes(event("/api/v1/pods") + b"\n")
    offset = fleetaudit.size(log)
    with log.open("ab") as f:
        f.write(event("/api/v1/nodes", resource="nodes") + b"\n" + event("/api/v1/x")[:20])
    calls, after = fleetaudit.read_from(log, offset)
    assert [c.resource for c in calls] == ["nodes"]
    # The partial line is read next time, once whole.
    with log.open("ab") as f:
        f.write(event("/api/v1/x")[20:] + b"\n")
    calls, _ = fleetaudit.read_from(log, after)
    assert [c.resource for c in calls] == ["pods"]


def test_a_rotated_or_missing_log(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "audit.log"
    assert fleetaudit.read_from(log, 100) == ([], 0)
    log.write_bytes(event("/api/v1/pods") + b"\n")
    calls, _ = fleetaudit.read_from(log, 10_000)  # smaller than the offset: rotated
    assert len(calls) == 1
