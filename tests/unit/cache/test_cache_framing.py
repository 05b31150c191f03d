"""Framing: watch lines, event object bytes, list items split one by one."""

from __future__ import annotations

import orjson
import pytest

from yurthub.cache import framing


def test_line_splitter_joins_chunks_and_skips_blanks() -> None:
    splitter = framing.LineSplitter(max_line=100)
    assert splitter.feed(b'{"a":') == []
    assert splitter.feed(b'1}\n\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert splitter.feed(b":3}") == []
    assert splitter.rest() == b'{"c":3}'
    assert splitter.rest() == b""


def test_line_splitter_bounds_an_unfinished_event() -> None:
    splitter = framing.LineSplitter(max_line=10)
    splitter.feed(b"12345")
    with pytest.raises(framing.FrameTooLarge):
        splitter.feed(b"678901")


def test_canonical_event_keeps_object_bytes() -> None:
    obj = b'{"metadata":{"name":"p","resourceVersion":"5"},"x": [1, 2]}'
    line = b'{"type":"ADDED","object":' + obj + b"}"
    event = framing.parse_event(line)
    assert event.type == "ADDED"
    assert event.raw == obj
    assert event.object["metadata"]["name"] == "p"


@pytest.mark.parametrize(
    "line",
    [
        b'{"object":{"metadata":{"name":"p"}},"type":"ADDED"}',
        b'{"type":"ADDED","object":{"metadata":{"name":"p"}},"extra":1}',
        b'{ "type" : "ADDED", "object" : {"metadata":{"name":"p"}} }',
    ],
)
def test_other_event_shapes_reencode_the_same_value(line: bytes) -> None:
    event = framing.parse_event(line)
    assert orjson.loads(event.raw) == {"metadata": {"name": "p"}}


@pytest.mark.parametrize(
    "line", [b"not json", b"[1]", b'{"type":1,"object":{}}', b'{"type":"ADDED"}']
)
def test_bad_events(line: bytes) -> None:
    with pytest.raises(framing.BadBody):
        framing.parse_event(line)


def _pod(name: str, **extra: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "default", "resourceVersion": "3"}, **extra}


def test_list_items_get_kind_and_keep_their_bytes() -> None:
    body = orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "9", "continue": "abc"},
            "items": [_pod("a"), _pod("b", spec={"nodeName": "n"})],
        }
    )
    head, items = framing.parse_list(body)
    assert (head.kind, head.item_kind, head.resource_version, head.continue_token) == (
        "PodList",
        "Pod",
        "9",
        "abc",
    )
    got = list(items)
    assert [i.object["metadata"]["name"] for i in got] == ["a", "b"]
    for item in got:
        decoded = orjson.loads(item.raw)
        assert decoded == item.object
        assert decoded["kind"] == "Pod" and decoded["apiVersion"] == "v1"
    assert got[1].raw.endswith(orjson.dumps(_pod("b", spec={"nodeName": "n"}))[1:])


def test_list_with_whitespace_items_first_non_ascii_and_empty_items() -> None:
    body = (
        '{ "items" : [ {"metadata":{"name":"ü"}} , {} ] ,\n "kind":"FooList", "apiVersion":"x/v1",'
        ' "metadata": {} }'
    ).encode()
    head, items = framing.parse_list(body)
    got = list(items)
    assert head.item_kind == "Foo"
    assert got[0].object == {"metadata": {"name": "ü"}, "kind": "Foo", "apiVersion": "x/v1"}
    assert orjson.loads(got[0].raw) == got[0].object
    assert orjson.loads(got[1].raw) == {"kind": "Foo", "apiVersion": "x/v1"}


def test_items_carrying_their_own_kind_are_untouched() -> None:
    item = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a"}}
    body = orjson.dumps({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": [item]})
    _, items = framing.parse_list(body)
    assert [i.raw for i in items] == [orjson.dumps(item)]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b'{"kind":"PodList","items":[1]}',
        b'{"kind":"PodList","apiVersion":"v1","items":[{}]} trailing',
        b'{"kind":"PodList","apiVersion":"v1","items":[{}',
        b'{"items":[]}',
        b"\xff\xfe",
    ],
)
def test_bad_lists(body: bytes) -> None:
    with pytest.raises(framing.BadBody):
        _, items = framing.parse_list(body)
        list(items)


@pytest.mark.parametrize(
    "item",
    [b'{"metadata":{"name":"a"},"x":NaN}', b'{"metadata":{"name":"\\ud800"}}', b'{"x":1e999}'],
)
@pytest.mark.parametrize("typing", [b"", b'"kind":"Pod",', b'"kind":"Pod","apiVersion":"v1",'])
def test_items_only_the_stdlib_scanner_accepts_are_bad_bodies(item: bytes, typing: bytes) -> None:
    # The scanner (stdlib json) accepts NaN, 1e999 and lone surrogates; orjson, which decodes
    # the item, refuses them. Either way the writer must see a BadBody, not a crash.
    head = b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[{'
    body = head + typing + item[1:] + b"]}"
    with pytest.raises(framing.BadBody):
        _, items = framing.parse_list(body)
        for found in items:
            found.object  # noqa: B018


@pytest.mark.parametrize(
    ("body", "whole"),
    [
        (
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}',
            True,
        ),
        (b'{"kind":"PodList","metadata":{"continue":"abc"},"items":[]}', False),
        (b'{"kind":"PodList","metadata":{"continue":""},"items":[]}', True),
        (b'{"items":[],"metadata":{}}', False),  # metadata after items: cannot tell
        (b'{"kind":"PodList"}', False),
        (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}', False),
        (b'{"kind":"Pod","apiVersion":"v1","metadata":{},"items":[]}', False),
    ],
)
def test_is_whole_list(body: bytes, whole: bool) -> None:
    assert framing.is_whole_list(body) is whole


def test_whole_list_kind_tells_forms_apart() -> None:
    head = b',"apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}'
    assert framing.whole_list_kind(b'{"kind":"PodList"' + head) == "PodList"
    partial = b'{"kind":"PartialObjectMetadataList"' + head
    assert framing.whole_list_kind(partial) == "PartialObjectMetadataList"


def test_list_items_know_their_identity_without_decoding() -> None:
    body = orjson.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [_pod("a")]}
    )
    _, items = framing.parse_list(body)
    (item,) = list(items)
    assert (item.name, item.namespace, item.resource_version) == ("a", "default", "3")
    assert item.decoded is None  # not decoded until asked
    assert item.object["kind"] == "Pod"
