"""Decoding JSON straight into a shape gives exactly what trimming the decoded object gives:
over real list answers of kube-apiserver (tests/data/kubeproto) and odd ones, for list pages
and watch events; what the compiled types refuse takes the slow way and loses nothing; watch
errors are the apiserver's errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubecontrol import decoding, kubeapi, trimming
from kubecontrol.trimming import DROP, INTERN, KEEP, Fields, Items, Shared

DATA = Path(__file__).resolve().parents[2] / "data" / "kubeproto"
META = {"name": KEEP, "namespace": INTERN, "resourceVersion": KEEP, "uid": KEEP}

SHAPES = {
    "small": trimming.Shape({"metadata": META}),
    "labels": trimming.Shape({"metadata": {**META, "labels": INTERN}, "kind": KEEP}),
    "nested": trimming.Shape(
        {
            "metadata": {
                **META,
                "annotations": Shared(Fields({"a/b": KEEP, "note": KEEP})),
                "ownerReferences": Shared(Items({"kind": KEEP, "controller": KEEP})),
            },
            "spec": Shared(Fields({"nodeName": KEEP, "tolerations": KEEP})),
            "status": {
                "phase": INTERN,
                "conditions": Items(
                    {"type": INTERN, "status": INTERN}, where=lambda c: c.get("type") == "Ready"
                ),
            },
        }
    ),
    "rest": trimming.WITHOUT_MANAGED_FIELDS,
    "drop": trimming.Shape(Fields({"metadata": META, "spec": DROP}, rest=KEEP)),
}


def _lists() -> list[str]:
    """The captured list answers (the directory also holds watch streams)."""
    found = []
    for path in sorted(DATA.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("items"), list):
            found.append(path.stem)
    return found


LISTS = _lists()


def page_bytes(items: list[Any], rv: str = "42", token: str = "") -> bytes:
    meta = {"resourceVersion": rv, **({"continue": token} if token else {})}
    return json.dumps(
        {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items}
    ).encode()


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("listed", LISTS)
def test_a_decoded_page_is_the_trimmed_page(shape: str, listed: str) -> None:
    items = json.loads((DATA / f"{listed}.json").read_text())["items"]
    decoder = decoding.Decoder(SHAPES[shape], trimming.Sharing())
    page = decoder.page(page_bytes(items, "7", "next"))
    reference = trimming.Sharing()
    assert page.items == [SHAPES[shape].trim_fields(i, reference) for i in items]
    assert (page.resource_version, page.continue_token) == ("7", "next")


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_decoded_event_is_the_trimmed_object(shape: str) -> None:
    decoder = decoding.Decoder(SHAPES[shape], trimming.Sharing())
    for item in json.loads((DATA / "pods.json").read_text())["items"]:
        line = json.dumps({"type": "MODIFIED", "object": item}).encode()
        event = decoder.event(line, "/api/v1/pods")
        assert event is not None and event.type == "MODIFIED"
        assert event.object == SHAPES[shape].trim_fields(item, trimming.Sharing())
    bookmark = {"kind": "Pod", "metadata": {"resourceVersion": "99"}}
    line = json.dumps({"type": "BOOKMARK", "object": bookmark}).encode()
    event = decoder.event(line, "/api/v1/pods")
    assert event is not None and kubeapi.resource_version_of(event.object) == "99"


ODD: list[Any] = [
    {"metadata": "not a mapping", "spec": {"nodeName": "n"}},
    {"metadata": {"name": "a", "annotations": {"a/b": 7, "note": None}}, "spec": None},
    {"metadata": {"name": "b", "ownerReferences": None}, "status": {"conditions": None}},
    {"metadata": {"name": "c", "labels": {"k": "v"}}, "status": {"conditions": [None, 3]}},
    {"metadata": {"name": "d", "resourceVersion": 12}, "spec": {"tolerations": "x"}},
]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_odd_json_takes_the_slow_way_and_loses_nothing(shape: str) -> None:
    decoder = decoding.Decoder(SHAPES[shape], trimming.Sharing())
    page = decoder.page(page_bytes(ODD))
    assert page.items == [SHAPES[shape].trim_fields(i, trimming.Sharing()) for i in ODD]
    for item in ODD:
        line = json.dumps({"type": "ADDED", "object": item}).encode()
        event = decoder.event(line, "/x")
        assert event is not None
        assert event.object == SHAPES[shape].trim_fields(item, trimming.Sharing())


def test_shared_values_are_shared_across_pages_and_events() -> None:
    decoder = decoding.Decoder(SHAPES["nested"], trimming.Sharing())
    items = json.loads((DATA / "pods.json").read_text())["items"][2:4]
    first = decoder.page(page_bytes(items[:1])).items[0]
    line = json.dumps({"type": "ADDED", "object": items[1]}).encode()
    event = decoder.event(line, "/x")
    assert event is not None
    assert first["spec"] is event.object["spec"]  # same node, same tolerations
    assert first["metadata"]["ownerReferences"] is event.object["metadata"]["ownerReferences"]


def test_empty_and_missing_parts_of_a_page() -> None:
    decoder = decoding.Decoder(SHAPES["small"], trimming.Sharing())
    assert decoder.page(b'{"items": null}') == kubeapi.ObjectList([], "", "")
    assert decoder.page(b'{"metadata": {"resourceVersion": "3"}}') == kubeapi.ObjectList(
        [], "3", ""
    )
    assert decoder.page(b'{"items": [null, {"metadata": {"name": "x"}}]}').items == [
        {"metadata": {"name": "x"}}
    ]
    with pytest.raises(kubeapi.Unavailable):
        decoder.page(b'{"items": [')


def test_watch_errors_are_the_apiservers_errors() -> None:
    decoder = decoding.Decoder(SHAPES["small"], trimming.Sharing())
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    with pytest.raises(kubeapi.Gone):
        decoder.event(json.dumps(gone).encode(), "/x")
    other = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}}
    with pytest.raises(kubeapi.Unavailable):
        decoder.event(json.dumps(other).encode(), "/x")
    assert decoder.event(b'{"type": "SOMETHING", "object": {}}', "/x") is None
    for bad in (b"{not json", b'{"type": "ADDED"}', b'{"type": "ADDED", "object": null}', b"[]"):
        with pytest.raises(kubeapi.Unavailable):
            decoder.event(bad, "/x")


PROBED = trimming.Shape(
    trimming.WITHOUT_MANAGED_FIELDS.fields,
    keep=lambda o: ((o.get("metadata") or {}).get("labels") or {}).get("keep") == "yes",
    probe={"metadata": {"name": KEEP, "namespace": KEEP, "resourceVersion": KEEP, "labels": KEEP}},
)


def test_a_probe_decodes_whole_only_the_objects_kept() -> None:
    pods = json.loads((DATA / "pods.json").read_text())["items"]
    for n, pod in enumerate(pods):
        pod["metadata"].setdefault("labels", {})["keep"] = "yes" if n % 2 else "no"
    odd = {"metadata": {"name": "odd", "labels": {"keep": "yes"}}, "spec": "not a mapping"}
    items = [*pods, odd, {"metadata": "x"}]
    decoder = decoding.Decoder(PROBED, trimming.Sharing())
    page = decoder.page(page_bytes(items)).items
    events = [
        decoder.event(json.dumps({"type": "ADDED", "object": o}).encode(), "/x") for o in items
    ]
    for item, listed, event in zip(items, page, events, strict=True):
        assert event is not None
        want = PROBED.trim(item, trimming.Sharing())
        for got in (listed, event.object):
            if want is None:
                assert not PROBED.keeps(got)
                assert set(got) <= {"metadata"} and "managedFields" not in got.get("metadata", {})
            else:
                assert got == want
    kept = [p for p in page if PROBED.keeps(p)]
    assert [p["metadata"]["name"] for p in kept] == [
        *(p["metadata"]["name"] for p in pods[1::2]),
        "odd",
    ]
    assert all("spec" in p for p in kept)


def test_a_probe_needs_keep_and_the_identity() -> None:
    with pytest.raises(ValueError):
        trimming.Shape({"metadata": META}, probe={"metadata": META})
    with pytest.raises(ValueError):
        trimming.Shape({"metadata": META}, keep=lambda o: True, probe={"metadata": {"name": KEEP}})
