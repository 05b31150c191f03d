"""One outage's record: bounded however long it lasts, stored and read back, and in words
(the Node Event's message, its name)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from yurthub.outages import records

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def at(seconds: float) -> records.Instant:
    """``seconds`` after T0 on both clocks, in one boot."""
    return records.Instant(T0 + seconds, "boot-1", 1000.0 + seconds)


def outage(**kwargs: Any) -> records.Outage:
    reason = "https://10.0.0.1:6443: connection refused"
    return records.begin(at(0), "19b76daa800", "refused", reason, **kwargs)


def token(i: int, pod: str = "web-0") -> records.Token:
    return records.Token("apps", f"sa-{i}", pod, ("https://kubernetes.default.svc",), T0, T0 + 60)


@pytest.mark.parametrize(
    ("codes", "answered", "refused", "by_code"),
    [
        ([200, 201, 304], 3, 0, {}),
        ([404, 404, 503], 0, 3, {"404": 2, "503": 1}),
        ([0], 0, 1, {"aborted": 1}),
        # at most MAX_CODES codes per key, the rest under "other"
        (list(range(400, 420)), 0, 20, {**{str(c): 1 for c in range(400, 408)}, "other": 12}),
    ],
)
def test_a_tally_counts_answers_and_refusals_per_code(
    codes: list[int], answered: int, refused: int, by_code: dict[str, int]
) -> None:
    tally = records.Tally()
    for code in codes:
        tally.add(code)
    assert (tally.answered, tally.refused, tally.codes) == (answered, refused, by_code)


def test_a_flood_of_distinct_keys_stays_bounded_and_every_answer_is_counted() -> None:
    o = outage()
    for i in range(10_000):
        o.answered(("kubelet", "get", f"resource-{i}"), f"source-{i % 20}", 200 if i % 2 else 404)
    assert len(o.tallies) == records.MAX_KEYS + 1  # the first MAX_KEYS, then "other"
    assert o.tallies[records.OTHER_KEY].answered + o.tallies[records.OTHER_KEY].refused == (
        10_000 - records.MAX_KEYS
    )
    assert o.answered_total == 5_000 and o.refused_total == 5_000
    assert len(o.sources) == records.MAX_SOURCES + 1
    assert sum(o.sources.values()) == 10_000
    stored = orjson.dumps(records.to_stored(o))
    assert len(stored) < 64 << 10


def test_tokens_are_listed_up_to_the_bound_and_all_counted_and_never_hold_the_token() -> None:
    o = outage()
    for i in range(500):
        o.issued(token(i, pod="p" * 1000))
    assert o.tokens_issued == 500
    assert len(o.tokens) == records.MAX_TOKENS
    assert all(len(t.pod) <= 253 for t in o.tokens)
    view = records.view(o, at(10))
    assert view["tokensNotListed"] == 500 - records.MAX_TOKENS
    assert set(view["tokens"][0]) == {
        "namespace",
        "serviceAccount",
        "pod",
        "audiences",
        "issued",
        "expires",
    }


def test_servers_and_their_reasons_are_bounded() -> None:
    o = outage()
    for i in range(100):
        o.failed(f"https://10.0.0.{i}:6443", "silent", "x" * 10_000)
    assert len(o.servers) == records.MAX_SERVERS
    assert all(len(reason) <= records.MAX_TEXT for reason in o.servers.values())
    assert o.causes == {"silent": 100}


def test_a_record_reads_back_as_it_was_stored() -> None:
    o = outage(dropped_before=3)
    o.failed("https://10.0.0.1:6443", "refused", "connection refused")
    o.failed("https://10.0.0.1:6443", "silent", "no answer within 2 s")
    o.answered(("kubelet", "list", "pods"), "cache", 200)
    o.answered(("kubelet", "create", "serviceaccounts/token"), "cache", 201)
    o.answered(("kubectl", "get", "configmaps"), "cache", 404)
    o.issued(token(1))
    o.restarts = 2
    o.end(at(312), dropped_now=10)
    back = records.from_stored(orjson.loads(orjson.dumps(records.to_stored(o))))
    assert back == o
    assert back.events_dropped == 7


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"began": T0},  # no id
        {"id": "1", "began": "yesterday"},
        {"id": "1", "began": T0, "answers": [["kubelet", "get"]]},
        {"id": "1", "began": T0, "causes": {"refused": "many"}},
        {"id": "1", "began": T0, "tokens": [[1, 2, 3]]},
        {"id": "1", "began": T0, "servers": ["a"]},
    ],
)
def test_what_is_not_a_record_is_a_value_error(data: Any) -> None:
    with pytest.raises(ValueError):
        records.from_stored(data)


def test_a_stored_record_over_the_bounds_is_cut_to_them_when_read() -> None:
    data = records.to_stored(outage())
    data["answers"] = [[f"c{i}", "get", "pods", 1, 0, {}] for i in range(10_000)]
    data["tokens"] = [["ns", f"sa{i}", "pod", ["aud"] * 100, T0, T0] for i in range(10_000)]
    back = records.from_stored(data)
    assert len(back.tallies) == records.MAX_KEYS + 1
    assert len(back.tokens) == records.MAX_TOKENS
    assert all(len(t.audiences) == records.MAX_AUDIENCES for t in back.tokens)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.6, "1s"), (59, "59s"), (312, "5m12s"), (3600, "1h00m"), (93784, "1d02h")],
)
def test_lasted(seconds: float, text: str) -> None:
    assert records.lasted(seconds) == text


def test_the_event_summarises_the_outage_on_the_node() -> None:
    o = outage()
    o.failed("https://10.0.0.1:6443", "silent", "no answer within 2 s")
    for _ in range(40):
        o.answered(("kubelet", "get", "nodes"), "cache", 200)
    o.answered(("kube-proxy", "list", "services"), "pool", 200)
    o.answered(("kubelet", "create", "events"), "cache", 201)
    o.answered(("kubectl", "get", "secrets"), "cache", 404)
    o.issued(token(1))
    o.restarts = 1
    o.end(at(312), dropped_now=0)
    event = records.event(o, "edge-1")
    assert event["metadata"] == {"name": "edge-1.edge-outage-19b76daa800", "namespace": "default"}
    assert event["involvedObject"] == {
        "kind": "Node",
        "name": "edge-1",
        "uid": "edge-1",
        "apiVersion": "v1",
    }
    assert (event["reason"], event["type"]) == ("EdgeOutageEnded", "Normal")
    assert event["firstTimestamp"] == "2026-01-01T00:00:00Z"
    assert event["lastTimestamp"] == "2026-01-01T00:05:12Z"
    message = event["message"]
    assert message.startswith("Node edge-1 could not reach the cloud for 5m12s")
    assert "connection refused (later also: no answer in time (a silent link))" in message
    assert "answered 42 requests locally (kubelet 41, kube-proxy 1" in message
    assert "refused 1 (404 1)" in message
    assert "issued 1 ServiceAccount token offline (apps/sa-1)" in message
    assert "1 Event recorded offline, 0 dropped" in message
    assert "The hub restarted once during it." in message


def test_the_event_name_is_the_outages_and_fits_a_long_node_name() -> None:
    o = outage()
    o.end(at(1), 0)
    assert records.event(o, "n")["metadata"]["name"] == records.event_name("n", o.id)
    name = records.event_name("n" * 253, o.id)
    assert len(name) == 253 and name.endswith(f".edge-outage-{o.id}")


def test_the_message_stays_within_bounds_whatever_the_names() -> None:
    o = outage()
    for i in range(records.MAX_KEYS):
        o.answered((f"component-{i}" * 20, "get", "pods"), "cache", 500 + i % 99)
    for i in range(records.MAX_TOKENS):
        o.issued(token(i, pod="p" * 253))
    o.end(at(10**7), 0)
    assert len(records.summary(o, "n" * 253)) <= records.MAX_MESSAGE


def test_an_ongoing_outage_is_viewed_as_ongoing() -> None:
    o = outage()
    view = records.view(o, at(90))
    assert (view["ongoing"], view["ended"], view["seconds"], view["event"]) == (
        True,
        None,
        90,
        "",
    )
    o.end(at(100), 0)
    assert records.view(o, at(500))["event"] == "pending"
