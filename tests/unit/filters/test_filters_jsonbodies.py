"""JSON bodies: the incremental list reader, lists, objects and watch streams, chunked any way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from filter_samples import kubernetes_service, service, slice_, world

from yurthub import jsonlists
from yurthub.filters import chaining, jsonbodies

DISCARD = {"svc.openyurt.io/discard": "true"}


def kube_proxy_services() -> chaining.Chain:
    return chaining.Chain(
        ["masterservice", "discardcloudservice", "nodeportisolation"],
        world(pool_flag="foo"),
        errors=chaining.ErrorLog(),
    )


def chunks(body: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i : i + size]


def run(body_filter: Any, body: bytes, size: int) -> bytes:
    out = b""
    for chunk in chunks(body, size):
        out += b"".join(body_filter.feed(chunk))
    return out + b"".join(body_filter.finish())


def service_list(items: list[dict[str, Any]]) -> bytes:
    # Items as the apiserver sends them: no kind/apiVersion of their own.
    bare = [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items]
    return orjson.dumps(
        {
            "kind": "ServiceList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "1234"},
            "items": bare,
        }
    )


SIZES = [1, 2, 3, 7, 64, 1 << 20]

# --- jsonlists.ListReader ---------------------------------------------------------------------


def read_all(body: bytes, size: int, max_item: int = 1 << 20) -> tuple[list[Any], bytes, str]:
    """(items, the raw rest handed back, why the reader gave up)."""
    reader = jsonlists.ListReader(max_item)
    pieces: list[jsonlists.Piece] = []
    for chunk in chunks(body, size):
        pieces.extend(reader.feed(chunk))
    pieces.extend(reader.finish())
    items = [p.value for p in pieces if isinstance(p, jsonlists.Item)]
    raw = b"".join(p.data for p in pieces if isinstance(p, jsonlists.Raw))
    return items, raw, reader.broken


@pytest.mark.parametrize("size", SIZES)
def test_reader_items_whatever_the_chunking(size: int) -> None:
    body = json.dumps(
        {
            "kind": "ThingList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "12", "remainingItemCount": 12345},
            "count": 1234567,
            "items": [
                {"name": "é€𝄞", "n": 1.5e3, "ok": True, "nil": None},
                {"a": [1, {"b": "]}"}]},
            ],
            "after": "x",
        },
        indent=1,
        ensure_ascii=False,
    ).encode()
    items, _, broken = read_all(body, size)
    assert not broken
    assert items == json.loads(body)["items"]


def test_reader_head_values_are_not_cut_at_chunk_boundaries() -> None:
    reader = jsonlists.ListReader(1 << 20)
    for chunk in chunks(b'{"count":1234567,"items":[]}', 1):
        reader.feed(chunk)
    reader.finish()
    assert reader.head["count"] == 1234567 and reader.done


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1,2]",
        b'{"items":[1,2]} trailing',
        b'{"items":[1,2',
        b'{"items":[1,,2]}',
        b'{"a" 1}',
        b'{"items":[{"a":1}]}\xff\xfe',
    ],
)
@pytest.mark.parametrize("size", [1, 5, 1 << 20])
def test_reader_gives_up_and_passes_the_rest_as_it_came(body: bytes, size: int) -> None:
    items, raw, broken = read_all(body, size)
    assert broken
    # Everything not handed out comes back exactly as it came.
    assert body.endswith(raw)
    assert items == [1, 2][: len(items)]


def test_reader_bounds_one_item() -> None:
    big = b'{"items":[{"a":"' + b"x" * 5000 + b'"},{"b":1}]}'
    _, raw, broken = read_all(big, 100, max_item=1000)
    assert broken.startswith("an element longer")
    assert raw == big[len(b'{"items":[') :]


def test_reader_decodes_a_big_item_about_twice_not_per_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    real = jsonlists._DECODER.raw_decode

    def counting(s: str, idx: int = 0) -> tuple[Any, int]:
        calls.append(idx)
        return real(s, idx)

    monkeypatch.setattr(jsonlists._DECODER, "raw_decode", counting)
    body = b'{"items":[{"a":"' + b"x" * 100_000 + b'"}]}'
    items, _, broken = read_all(body, 1000)
    assert not broken and len(items) == 1
    assert len(calls) < 20  # 100 chunks: a retry per chunk would be ~100


# --- lists --------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_list_drops_items_and_keeps_the_list(size: int) -> None:
    items = [
        service("svc1", type_="LoadBalancer", annotations=DISCARD),
        kubernetes_service(),
        service("plain"),
        service("x-tunnel-server-internal-svc", "kube-system"),
    ]
    body = service_list(items)
    f = jsonbodies.ListBody(kube_proxy_services(), "Service", max_item=1 << 20)
    out = orjson.loads(run(f, body, size))
    assert out["kind"] == "ServiceList" and out["apiVersion"] == "v1"
    assert out["metadata"] == {"resourceVersion": "1234"}
    assert [i["metadata"]["name"] for i in out["items"]] == ["kubernetes", "plain"]
    assert out["items"][0]["spec"]["clusterIP"] == "169.251.2.1"
    assert "kind" not in out["items"][1]  # unchanged items are the bytes that came
    assert (f.counts.objects, f.counts.changed, f.counts.dropped) == (4, 1, 2)


def test_list_all_dropped_is_an_empty_list() -> None:
    body = service_list([service("a", type_="LoadBalancer", annotations=DISCARD)])
    f = jsonbodies.ListBody(kube_proxy_services(), "Service", max_item=1 << 20)
    out = orjson.loads(run(f, body, 3))
    assert out == {
        "kind": "ServiceList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "1234"},
        "items": [],
    }


def test_list_unchanged_is_the_same_json() -> None:
    body = service_list([service("a"), service("b")])
    f = jsonbodies.ListBody(kube_proxy_services(), "Service", max_item=1 << 20)
    assert run(f, body, 11) == body


def test_list_items_come_out_as_they_arrive() -> None:
    f = jsonbodies.ListBody(kube_proxy_services(), "Service", max_item=1 << 20)
    body = service_list([service("a"), service("b")])
    head_and_first = body[: body.index(b'{"metadata":{"name":"b"')]
    out = b"".join(f.feed(head_and_first))
    assert b'"name":"a"' in out  # the first item left before the second arrived


def test_list_that_is_not_json_passes_unchanged_and_is_counted() -> None:
    f = jsonbodies.ListBody(kube_proxy_services(), "Service", max_item=1 << 20)
    assert run(f, b"\x00\x01garbage", 2) == b"\x00\x01garbage"
    assert f.counts.undecodable == 1


def test_list_item_of_wrong_shape_passes() -> None:
    body = b'{"kind":"ServiceList","items":[1,"x",{"metadata":{"name":"a"}}]}'
    f = jsonbodies.ListBody(kube_proxy_services(), "Service", max_item=1 << 20)
    assert orjson.loads(run(f, body, 4))["items"] == [1, "x", {"metadata": {"name": "a"}}]
    assert f.counts.undecodable == 2


# --- objects ------------------------------------------------------------------------------------


def test_object_changed_dropped_and_bounded() -> None:
    chain = kube_proxy_services()
    f = jsonbodies.ObjectBody(chain, "Service", max_bytes=1 << 20)
    out = orjson.loads(run(f, orjson.dumps(kubernetes_service()), 5))
    assert out["spec"]["clusterIP"] == "169.251.2.1"
    # A get never disappears: a dropped object is sent as it came.
    dropped = orjson.dumps(service("x", type_="LoadBalancer", annotations=DISCARD))
    f = jsonbodies.ObjectBody(chain, "Service", max_bytes=1 << 20)
    assert run(f, dropped, 5) == dropped and f.counts.dropped == 1
    # Over the bound: passed through as it came, counted.
    f = jsonbodies.ObjectBody(chain, "Service", max_bytes=50)
    body = orjson.dumps(kubernetes_service())
    assert run(f, body, 7) == body and f.counts.undecodable == 1


def test_object_that_is_a_list_has_its_items_filtered() -> None:
    body = service_list([service("x", type_="LoadBalancer", annotations=DISCARD), service("b")])
    counts = jsonbodies.Counts()
    out = orjson.loads(jsonbodies.filter_object(kube_proxy_services(), body, "Service", counts))
    assert [i["metadata"]["name"] for i in out["items"]] == ["b"]


def test_filter_item() -> None:
    chain = kube_proxy_services()
    counts = jsonbodies.Counts()
    plain = orjson.dumps(service("a"))
    assert jsonbodies.filter_item(chain, plain, "Service", counts) is plain
    dropped = orjson.dumps(service("x", type_="LoadBalancer", annotations=DISCARD))
    assert jsonbodies.filter_item(chain, dropped, "Service", counts) is None
    assert jsonbodies.filter_item(chain, b"{nope", "Service", counts) == b"{nope"
    assert counts.undecodable == 1


# --- watch streams ------------------------------------------------------------------------------


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


def kube_proxy_slices() -> chaining.Chain:
    w = world(services={("default", "svc1"): "kubernetes.io/hostname"})
    return chaining.Chain(
        ["servicetopology", "forwardkubesvctraffic"], w, errors=chaining.ErrorLog()
    )


@pytest.mark.parametrize("size", SIZES)
def test_watch_events_filtered_one_by_one(size: int) -> None:
    chain = kube_proxy_services()
    dropped_svc = service("svc1", type_="LoadBalancer", annotations=DISCARD)
    bookmark = {"kind": "Service", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}}
    error = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410}
    stream = b"".join(
        [
            event("ADDED", service("plain")),
            event("MODIFIED", dropped_svc),
            event("BOOKMARK", bookmark),
            event("ADDED", kubernetes_service()),
            b"not an event\n",
            event("DELETED", dropped_svc),
            event("ERROR", error),
        ]
    )
    f = jsonbodies.WatchStream(chain, "Service", max_event=1 << 20)
    lines = run(f, stream, size).split(b"\n")
    assert lines[-1] == b""
    assert lines[0] + b"\n" == event("ADDED", service("plain"))  # byte-identical
    assert orjson.loads(lines[1]) == {"type": "DELETED", "object": dropped_svc}
    assert lines[2] + b"\n" == event("BOOKMARK", bookmark)
    changed = orjson.loads(lines[3])
    assert changed["type"] == "ADDED" and changed["object"]["spec"]["clusterIP"] == "169.251.2.1"
    assert lines[4] == b"not an event"
    assert orjson.loads(lines[5]) == {"type": "DELETED", "object": dropped_svc}
    assert lines[6] + b"\n" == event("ERROR", error)
    assert f.counts.undecodable == 1


def test_watch_sends_each_event_as_soon_as_it_is_complete() -> None:
    f = jsonbodies.WatchStream(kube_proxy_slices(), "EndpointSlice", max_event=1 << 20)
    one = event("MODIFIED", slice_("svc1-a", "svc1", ["node1", "node2"]))
    assert b"".join(f.feed(one[:-10])) == b""
    out = b"".join(f.feed(one[-10:]))
    assert [e["nodeName"] for e in orjson.loads(out)["object"]["endpoints"]] == ["node1"]


def test_watch_oversized_event_passes_through_and_the_next_is_filtered() -> None:
    f = jsonbodies.WatchStream(kube_proxy_slices(), "EndpointSlice", max_event=600)
    big = slice_("svc1-big", "svc1", ["node2"] * 20)
    small = slice_("svc1-a", "svc1", ["node1", "node2"])
    stream = event("ADDED", big) + event("ADDED", small)
    out = run(f, stream, 64).split(b"\n")
    assert out[0] + b"\n" == event("ADDED", big)  # untouched
    assert len(orjson.loads(out[1])["object"]["endpoints"]) == 1
    assert f.counts.undecodable == 1


def test_watch_last_event_without_newline() -> None:
    f = jsonbodies.WatchStream(kube_proxy_slices(), "EndpointSlice", max_event=1 << 20)
    one = event("ADDED", slice_("svc1-a", "svc1", ["node1", "node2"])).rstrip(b"\n")
    out = run(f, one, 1 << 20)
    assert len(orjson.loads(out)["object"]["endpoints"]) == 1


def test_watch_kind_from_the_request_when_objects_carry_none() -> None:
    f = jsonbodies.WatchStream(kube_proxy_slices(), "EndpointSlice", max_event=1 << 20)
    obj = slice_("svc1-a", "svc1", ["node1", "node2"])
    del obj["kind"]
    out = run(f, event("ADDED", obj), 1 << 20)
    assert len(orjson.loads(out)["object"]["endpoints"]) == 1


def _pods(*envs: list[dict[str, str]]) -> bytes:
    items = [
        {"metadata": {"name": f"p{i}"}, "spec": {"containers": [{"name": "c", "env": env}]}}
        for i, env in enumerate(envs)
    ]
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})


def _gated(body: bytes, cut: int, max_bytes: int = 1 << 20) -> bytes:
    chain = chaining.Chain(["serviceenvupdater"], world(), errors=chaining.ErrorLog())
    assert chain.gated
    f = jsonbodies.GatedList(chain, "Pod", max_item=1 << 20, max_bytes=max_bytes)
    out = b"".join(b"".join(f.feed(body[i : i + cut])) for i in range(0, len(body), cut))
    return out + b"".join(f.finish())


@pytest.mark.parametrize("cut", [1, 7, 40, 1 << 20])
def test_gated_list_without_needles_passes_the_bytes_that_came(cut: int) -> None:
    body = _pods([{"name": "A", "value": "1"}], [], [{"name": "B", "value": "2"}])
    assert _gated(body, cut) == body


@pytest.mark.parametrize("cut", [1, 7, 40, 1 << 20])
def test_gated_list_with_a_needle_anywhere_is_filtered_whole(cut: int) -> None:
    # The needle may straddle chunks (cut=7): the overlap still finds it.
    host = {"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"}
    body = _pods([], [{"name": "A", "value": "1"}], [host])
    out = orjson.loads(_gated(body, cut))
    assert [i["metadata"]["name"] for i in out["items"]] == ["p0", "p1", "p2"]
    env = out["items"][2]["spec"]["containers"][0]["env"][0]
    assert env["name"] == "KUBERNETES_SERVICE_HOST" and env["value"] != "10.0.0.1"


def test_gated_list_over_its_bound_is_filtered_item_by_item() -> None:
    host = {"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"}
    body = _pods(*([[{"name": "X", "value": "y" * 50}]] * 20), [host])
    out = orjson.loads(_gated(body, 64, max_bytes=256))  # the needle comes past the bound
    assert len(out["items"]) == 21
    assert out["items"][20]["spec"]["containers"][0]["env"][0]["value"] != "10.0.0.1"
