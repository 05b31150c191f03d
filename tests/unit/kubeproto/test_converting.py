"""The protobuf -> JSON converter against what the real kube-apiserver answers.

Fixtures (tests/data/kubeproto/): the same lists fetched once as protobuf and once as JSON from
a real v1.37.2 apiserver (``capture.py``: a hollow node running a Deployment, a Job and a pod
using probes, quantities, tolerations, projected volumes; Services, a PV/PVC, a CSIDriver, a
RuntimeClass, a VolumeAttachment, binary ConfigMap data, Secrets, leases, events,
ClusterRoles, FlowSchemas...), and a streaming-list watch of ConfigMaps in both forms. The
converted protobuf must equal the apiserver's own JSON, field for field.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from yurthub.cache import framing
from yurthub.kubeproto import converting, wire

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "kubeproto"
LISTS = sorted(p.stem for p in DATA.glob("*.pb") if not p.name.startswith("watch-"))


@pytest.fixture(scope="module")
def converter() -> converting.Converter:
    return converting.Converter()


def test_fixtures_cover_what_kubelet_and_kube_proxy_read() -> None:
    wanted = {
        "pods", "nodes", "services", "endpoints", "endpointslices", "configmaps", "secrets",
        "leases", "namespaces", "serviceaccounts", "events", "csidrivers", "runtimeclasses",
        "pv", "pvc", "volumeattachments",
    }  # fmt: skip
    assert wanted <= set(LISTS)


@pytest.mark.parametrize("name", LISTS)
def test_list_converts_to_the_apiservers_json(converter: converting.Converter, name: str) -> None:
    want = json.loads((DATA / f"{name}.json").read_bytes())
    got = converter.object((DATA / f"{name}.pb").read_bytes())
    assert want["items"], f"{name}: the fixture holds no object"
    assert got == want


@pytest.mark.parametrize("name", LISTS)
def test_lists_convert_item_by_item_to_the_same_json(
    converter: converting.Converter, name: str
) -> None:
    # What the cache writer uses for lists: one item at a time, never the decoded whole.
    want = json.loads((DATA / f"{name}.json").read_bytes())
    listed = converter.list_json((DATA / f"{name}.pb").read_bytes())
    assert listed is not None
    assert json.loads(listed) == want


def test_item_by_item_keeps_an_empty_list_and_refuses_what_is_no_list(
    converter: converting.Converter,
) -> None:
    body = (DATA / "leases.pb").read_bytes()
    api_version, kind, raw = converter.envelope(body)
    # The same list without its items (field 2 of every List message).
    from yurthub.kubeproto import wire

    bare = b"".join(whole for number, _, _, whole in wire.fields(raw) if number != 2)
    unknown = converter._class("k8s.io.apimachinery.pkg.runtime.Unknown")()
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind, unknown.raw = api_version, kind, bare
    empty = converting.MAGIC + unknown.SerializeToString()
    got = json.loads(converter.list_json(empty) or b"null")
    assert got["items"] == [] and got["kind"] == "LeaseList" and got["metadata"]
    # A single object is not a list: None, the caller converts it whole.
    item = next(whole for number, _, whole, _ in wire.fields(raw) if number == 2)
    assert isinstance(item, bytes)
    unknown.typeMeta.kind, unknown.raw = "Lease", item
    single = converting.MAGIC + unknown.SerializeToString()
    assert converter.list_json(single) is None
    assert converter.object(single)["kind"] == "Lease"
    # A list whose items are cut short is undecodable, never half a list.
    truncated = body[:-7]
    with pytest.raises(converting.Undecodable):
        converter.list_json(truncated)


def test_the_pods_fixture_exercises_the_special_types(converter: converting.Converter) -> None:
    pods = converter.object((DATA / "pods.pb").read_bytes())
    rich = next(p for p in pods["items"] if p["metadata"]["name"] == "rich")
    container = rich["spec"]["containers"][0]
    assert container["resources"]["requests"]["cpu"] == "250m"  # Quantity, canonical
    assert container["readinessProbe"]["httpGet"]["port"] == "http"  # IntOrString, string
    assert container["livenessProbe"]["tcpSocket"]["port"] == 80  # IntOrString, int
    assert {"name": "A"} in container["env"]  # omitempty "" dropped
    assert rich["spec"]["tolerations"][0]["tolerationSeconds"] == 30  # pointer int64
    status = rich["status"]["containerStatuses"][0]
    assert status["restartCount"] == 0  # not omitempty: the zero stays
    assert rich["metadata"]["managedFields"][0]["fieldsV1"]  # FieldsV1: embedded JSON
    binary = converter.object((DATA / "configmaps.pb").read_bytes())
    assert any("binaryData" in c for c in binary["items"])  # map<string, bytes>: base64


def test_watch_frames_convert_to_the_apiservers_events(converter: converting.Converter) -> None:
    frames = framing.FrameSplitter(1 << 20).feed((DATA / "watch-configmaps.pb").read_bytes())
    want = [json.loads(line) for line in (DATA / "watch-configmaps.json").read_bytes().splitlines()]
    got = [converter.event(frame) for frame in frames]
    assert got == want
    end = got[-1]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    def field(number: int, data: bytes) -> bytes:
        return bytes([number << 3 | 2, len(data)]) + data

    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return converting.MAGIC + field(1, type_meta) + field(2, raw)


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'{"kind":"Pod"}', ""),  # JSON, not protobuf
        (converting.MAGIC + b"\xff\xff", ""),  # corrupt envelope
        (_envelope("example.com/v1", "Widget", b""), "example.com/v1/Widget"),  # a CRD
        (_envelope("v1", "Pod", b"\x0a\x05ab"), "v1/Pod"),  # truncated metadata
        (_envelope("v1", "ConfigMap", b"\x12\x02\xff\xfe"), "v1/ConfigMap"),  # bad entry
    ],
)
def test_what_does_not_convert_raises_undecodable_naming_the_kind(
    converter: converting.Converter, body: bytes, kind: str
) -> None:
    with pytest.raises(converting.Undecodable) as caught:
        converter.object(body)
    assert caught.value.kind == kind


def test_a_watch_frame_holding_garbage_raises_undecodable(
    converter: converting.Converter,
) -> None:
    with pytest.raises(converting.Undecodable):
        converter.event(b"\x0a\x05ADDED\x12\x03\x0a\x01x")


@pytest.mark.parametrize(
    ("nanos", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1500, "1.5\u00b5s"),
        (2_000_000, "2ms"),
        (1_500_000_000, "1.5s"),
        (90 * 10**9, "1m30s"),
        (3600 * 10**9, "1h0m0s"),
        (3723 * 10**9 + 500_000_000, "1h2m3.5s"),
        (-5 * 10**9, "-5s"),
    ],
)
def test_go_duration(nanos: int, text: str) -> None:
    assert converting.go_duration(nanos) == text


@pytest.mark.parametrize(
    ("chunks", "frames", "rest"),
    [
        ([b"\x00\x00\x00\x02ab\x00\x00\x00\x01c"], [b"ab", b"c"], b""),
        ([b"\x00\x00", b"\x00\x03a", b"bc\x00"], [b"abc"], b"\x00"),
        ([b"\x00\x00\x00\x00"], [b""], b""),
    ],
)
def test_frame_splitter(chunks: list[bytes], frames: list[bytes], rest: bytes) -> None:
    splitter = framing.FrameSplitter(16)
    got: list[Any] = []
    for chunk in chunks:
        got += splitter.feed(chunk)
    assert got == frames
    assert splitter.rest() == rest


def test_frame_splitter_refuses_a_frame_over_the_bound_before_holding_it() -> None:
    splitter = framing.FrameSplitter(16)
    with pytest.raises(framing.FrameTooLarge):
        splitter.feed(b"\x00\x00\x01\x00")


def _maps(obj: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(where, keys in order) of the string maps an object of the fixtures holds."""
    found: list[tuple[str, list[str]]] = []
    meta = obj.get("metadata") or {}
    for field in ("labels", "annotations"):
        found.append((f"metadata.{field}", list(meta.get(field) or {})))
    found.append(("data", list(obj.get("data") or {})))
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    found.append(("spec.selector", list(spec.get("selector") or {})))
    found.append(("status.capacity", list(status.get("capacity") or {})))
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        for field in ("limits", "requests"):
            found.append((f"resources.{field}", list(resources.get(field) or {})))
    return [(where, keys) for where, keys in found if len(keys) > 1]


def test_map_keys_come_in_gos_order(converter: converting.Converter) -> None:
    # Go's encoding/json writes map keys sorted; upb hands map entries out in hash order.
    checked = 0
    for name in LISTS:
        want = json.loads((DATA / f"{name}.json").read_bytes())
        listed = converter.list_json((DATA / f"{name}.pb").read_bytes())
        assert listed is not None
        for got_item, want_item in zip(json.loads(listed)["items"], want["items"], strict=True):
            assert _maps(got_item) == _maps(want_item), name
            checked += len(_maps(want_item))
    assert checked > 20, "the fixtures hold maps of several keys"


def test_list_items_are_views_into_the_body_not_copies(converter: converting.Converter) -> None:
    # A 10,000-pod list is ~40 MB: its items are read where they lie, never copied out.
    body = (DATA / "pods.pb").read_bytes()
    split = converter.split_list(body)
    assert split is not None and split.items
    for span in split.items:
        assert isinstance(span, memoryview) and span.obj is body
    want = json.loads((DATA / "pods.json").read_bytes())["items"]
    assert [split.item(span) for span in split.items] == want


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05abc",  # a length past the end
        b"\x0a",  # a tag without its length
        b"\x0b",  # wire type 3 (groups) is not Kubernetes'
        b"\x09\x00\x00",  # a fixed64 cut short
        b"\x02\x01x",  # field number 0
    ],
)
def test_offsets_refuse_a_malformed_message(data: bytes) -> None:
    with pytest.raises(wire.DecodeError):
        list(wire.offsets(data, 0, len(data)))
    with pytest.raises(wire.DecodeError):
        wire.spans(memoryview(data), 0, len(data), (1,))


def test_spans_give_offsets_and_nothing_else() -> None:
    data = b"\x08\x96\x01" + b"\x12\x03abc" + b"\x1a\x00" + b"\x12\x01z"
    assert wire.spans(data, 0, len(data), (2, 3, 4)) == [(12, 13), (10, 10), None]  # last wins
    assert wire.spans(data, 0, len(data), (2,), first_only=True) == [None]
    fields = [(n, t) for n, t, *_ in wire.offsets(data, 0, len(data))]
    assert fields == [(1, 0), (2, 2), (3, 2), (2, 2)]
    assert data[12:13] == b"z"


RESOURCES = {"pv": "persistentvolumes", "pvc": "persistentvolumeclaims", "eventsv1": "events"}


@pytest.mark.parametrize("name", LISTS)
def test_the_index_fields_read_from_the_wire_equal_the_converted_ones(
    converter: converting.Converter, name: str
) -> None:
    # What the cache indexes a protobuf object by (stored as received) must be what it would
    # index the apiserver's JSON of it by: identity, labels and every selectable field.
    from yurthub.cache import selectors

    resource = RESOURCES.get(name, name)
    paths = selectors.index_paths(resource)
    want = json.loads((DATA / f"{name}.json").read_bytes())["items"]
    split = converter.split_list((DATA / f"{name}.pb").read_bytes())
    assert split is not None and len(split.items) == len(want)
    for span, full in zip(split.items, want, strict=True):
        got = split.skeleton(span, paths)
        assert selectors.field_values(resource, got) == selectors.field_values(resource, full)
        for field in ("name", "namespace", "resourceVersion", "labels"):
            assert got["metadata"].get(field) == full["metadata"].get(field)
        assert set(got) <= set(full) | {"metadata"}


def test_the_index_fields_of_a_kind_reach_into_the_objects_it_selects_by() -> None:
    from yurthub.cache import selectors

    pods = selectors.index_paths("pods")
    assert pods["spec"]["nodeName"] is None and pods["status"]["phase"] is None
    assert set(pods["metadata"]) == {"name", "namespace", "resourceVersion", "labels"}
    events = selectors.index_paths("events")
    assert events["involvedObject"] is None and events["regarding"] is None
    assert set(selectors.index_paths("configmaps")) == {"metadata"}


def test_a_fresh_converter_used_by_many_threads_at_once_converts_every_kind_right() -> None:
    """A hub converts on its reader threads and its pool's worker threads at once, and a fresh
    converter adds each kind's descriptors to its pool at first use. upb's objects are
    thread-compatible, not thread-safe (a pool growing while another thread parses from it is
    unsafe): the converter keeps all of its protobuf work under its own lock. Every kind of the
    real apiserver's fixtures, converted by 8 threads at once from a cold converter, is what one
    thread alone makes of it."""
    import threading

    alone = converting.Converter()
    bodies = [(DATA / f"{name}.pb").read_bytes() for name in LISTS]
    expected = [alone.list_json(body) for body in bodies]
    shared = converting.Converter()
    got: dict[tuple[int, int], bytes | None] = {}

    def work(thread: int) -> None:
        for round_ in range(3):
            for n in range(len(bodies)):
                at = (n + thread * 5) % len(bodies)
                got[(thread, at + round_ * len(bodies))] = shared.list_json(bodies[at])

    threads = [threading.Thread(target=work, args=(t,), name=f"convert-{t}") for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(got) == 8 * 3 * len(bodies)
    for (_, slot), value in got.items():
        assert value == expected[slot % len(bodies)]
