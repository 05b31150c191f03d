"""Protobuf bodies assembled from stored messages equal the apiserver's own, byte for byte."""

from __future__ import annotations

import pathlib

import pytest

from yurthub.kubeproto import converting, enveloping, wire

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "kubeproto"
LISTS = sorted(p.stem for p in DATA.glob("*.pb") if not p.name.startswith("watch-"))


@pytest.mark.parametrize("name", LISTS)
def test_a_list_of_the_same_items_is_the_apiservers_body(name: str) -> None:
    body = (DATA / f"{name}.pb").read_bytes()
    converter = converting.Converter()
    split = converter.split_list(body)
    assert split is not None
    api_version, kind, _ = converter.envelope(body)
    rv = split.head["metadata"]["resourceVersion"]
    assembled = enveloping.ListBody(api_version, kind, rv, split.items)
    for group in (1, 3, 1000):
        out = b"".join(assembled.parts(group))
        assert out == body
        assert assembled.size == len(out)


def test_an_empty_list_and_an_object_envelope() -> None:
    converter = converting.Converter()
    empty = b"".join(enveloping.ListBody("v1", "PodList", "42", []).parts())
    decoded = converter.object(empty)
    assert (decoded["kind"], decoded["metadata"]) == ("PodList", {"resourceVersion": "42"})
    assert not decoded["items"]  # no item on the wire (Go decodes a nil slice)
    stream = (DATA / "watch-configmaps.pb").read_bytes()
    size = int.from_bytes(stream[:4], "big")
    _, body = converter.event_parts(stream[4 : 4 + size])
    api_version, kind, raw = converter.envelope(body)
    # The envelope a watch event (and a get) carries is the one the cache stores.
    assert enveloping.envelope(api_version, kind, raw) == body


def test_the_raw_span_of_an_envelope_matches_the_general_reader() -> None:
    converter = converting.Converter()
    split = converter.split_list((DATA / "pods.pb").read_bytes())
    assert split is not None
    for item in split.items:
        body = enveloping.envelope("v1", "Pod", item)
        _, _, start, end = converting.envelope_at(body)
        assert enveloping.raw_span(body) == (start, end)
    body = enveloping.envelope("v1", "Pod", split.items[0])
    for broken in (body[:3], b"k8s\x00\x12\x00", body[: len(body) // 2], b"{}"):
        with pytest.raises(wire.DecodeError):
            enveloping.raw_span(broken)
