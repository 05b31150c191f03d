"""Entry encoding: header + body round trips; corrupt values are refused, never guessed."""

from __future__ import annotations

import pytest

from yurthub.cache import entries


def make_entry() -> entries.Entry:
    return entries.Entry(
        resource_version="12",
        rv=12,
        kind="Pod",
        api_version="v1",
        labels={"app": "x"},
        fields={"spec.nodeName": "n1"},
        owners=frozenset({"", "kubelet/pods.v1.core?"}),
        size=2,
    )


def test_object_round_trip_keeps_body_bytes() -> None:
    value = entries.encode_object(make_entry(), b"{}")
    entry, body = entries.decode_object(value)
    assert entry == make_entry()
    assert body == b"{}"
    assert entries.body_of(value) == b"{}"
    assert entries.decode_header(value) == make_entry()
    assert entries.kind_of(value) == "o"


def test_table_cells_and_columns_round_trip() -> None:
    entry = make_entry().with_cells(("web-0", "1/1", "Running", "0", "5d"))
    assert entries.decode_header(entries.encode_object(entry, b"{}")) == entry
    assert entry.with_owners(frozenset({""})).cells == entry.cells
    columns = ({"name": "Name", "type": "string", "format": "name", "priority": 0},)
    record = entries.ListRecord("9", 9, "PartialObjectMetadata", "meta.k8s.io/v1", 3, columns)
    assert entries.decode_list(entries.encode_list(record)) == record


def test_list_record_and_document_round_trip() -> None:
    record = entries.ListRecord("9", 9, "Pod", "v1", 3)
    assert entries.decode_list(entries.encode_list(record)) == record
    doc = entries.encode_document("application/json", b'{"major":"1"}')
    assert entries.decode_document(doc) == ("application/json", b'{"major":"1"}')


@pytest.mark.parametrize(
    "value",
    [b"", b"EHC1", b"XXXX\x00\x00\x00\x02{}", b"EHC1\x00\x00\x00\xff{}", b"EHC1\x00\x00\x00\x02[]"],
)
def test_corrupt_values(value: bytes) -> None:
    with pytest.raises(entries.CorruptEntry):
        entries.decode_object(value)


def test_wrong_entry_type_is_refused() -> None:
    with pytest.raises(entries.CorruptEntry):
        entries.decode_object(entries.encode_list(entries.ListRecord("1", 1, "Pod", "v1", 0)))


@pytest.mark.parametrize(
    ("rv", "expected"), [("12", 12), ("", -1), ("abc", -1), ("-3", -1), ("٣", -1)]
)
def test_parse_rv(rv: str, expected: int) -> None:
    assert entries.parse_rv(rv) == expected
