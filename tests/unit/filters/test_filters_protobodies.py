"""Protobuf bodies: objects, lists and watch frames, checked with an independent codec."""

from __future__ import annotations

from typing import Any

import pytest
from filter_samples import world

from yurthub.filters import chaining, jsonbodies, protobodies
from yurthub.kubeproto import converting
from yurthub.testing.protomessages import (
    CLASSES,
    entries,
    envelope,
    frame,
    frames,
    message,
    open_envelope,
)

DISCARD = {"svc.openyurt.io/discard": "true"}


def meta(name: str, namespace: str = "default", **more: Any) -> Any:
    return message("ObjectMeta", name=name, namespace=namespace, uid=f"uid-{name}", **more)


def svc(name: str, namespace: str = "default", type_: str = "ClusterIP", **meta_more: Any) -> Any:
    return message(
        "Service",
        metadata=meta(name, namespace, **meta_more),
        spec=message(
            "ServiceSpec",
            ports=[
                message(
                    "ServicePort",
                    name="https",
                    protocol="TCP",
                    port=443,
                    targetPort=message("IntOrString", type=0, intVal=6443),
                )
            ],
            selector={"app": name},
            clusterIP="10.96.0.1",
            type=type_,
            sessionAffinity="None",
            clusterIPs=["10.96.0.1"],
        ),
        status=b"\x0a\x00",
    )


def chain(names: list[str], **w: Any) -> chaining.Chain:
    return chaining.Chain(names, world(**w), errors=chaining.ErrorLog())


SERVICES = ["masterservice", "discardcloudservice", "nodeportisolation"]


def test_object_rewritten_and_every_other_field_kept() -> None:
    body = envelope("Service", svc("kubernetes"))
    counts = jsonbodies.Counts()
    out, dropped = protobodies.filter_object(chain(SERVICES), body, counts)
    assert not dropped and counts.changed == 1
    got = open_envelope(out, "Service")
    assert got.spec.clusterIP == "169.251.2.1"
    assert list(got.spec.clusterIPs) == ["169.251.2.1"]
    assert got.spec.ports[0].port == 10268
    # Untouched: fields the hub's codec does not even name.
    assert got.metadata.uid == "uid-kubernetes"
    assert got.spec.ports[0].targetPort.intVal == 6443
    assert entries(got.spec.selector) == {"app": "kubernetes"}
    assert got.spec.sessionAffinity == "None" and got.status == b"\x0a\x00"
    # An independent decoder (the cache's converter) reads the result.
    decoded = converting.Converter().object(out)
    assert decoded["spec"]["clusterIP"] == "169.251.2.1"
    assert decoded["spec"]["ports"][0] == {
        "name": "https",
        "protocol": "TCP",
        "port": 10268,
        "targetPort": 6443,
    }


def test_unchanged_and_dropped_objects_are_the_bytes_that_came() -> None:
    counts = jsonbodies.Counts()
    plain = envelope("Service", svc("plain"))
    out, dropped = protobodies.filter_object(chain(SERVICES), plain, counts)
    assert out is plain and not dropped
    discard = envelope("Service", svc("lb", type_="LoadBalancer", annotations=DISCARD))
    out, dropped = protobodies.filter_object(chain(SERVICES), discard, counts)
    assert out is discard and dropped


@pytest.mark.parametrize(
    "body",
    [
        b"not protobuf",
        b"k8s\x00\xff\xff",
        envelope("Service", svc("kubernetes"))[:-3],  # truncated
        envelope("Secret", message("ConfigMap", metadata=meta("s"))),  # a kind we do not read
    ],
)
def test_what_does_not_decode_passes_unchanged(body: bytes) -> None:
    counts = jsonbodies.Counts()
    out, dropped = protobodies.filter_object(chain(SERVICES), body, counts)
    assert out == body and not dropped


def test_list_items_dropped_and_changed() -> None:
    items = [
        svc("lb", type_="LoadBalancer", annotations=DISCARD),
        svc("kubernetes"),
        svc("plain"),
    ]
    body = envelope(
        "ServiceList",
        message("ServiceList", metadata=message("ListMeta", resourceVersion="77"), items=items),
    )
    f = protobodies.ObjectBody(chain(SERVICES), max_bytes=1 << 20)
    out = b"".join(f.feed(body[:10])) + b"".join(f.feed(body[10:])) + b"".join(f.finish())
    got = open_envelope(out, "ServiceList")
    assert got.metadata.resourceVersion == "77"
    assert [i.metadata.name for i in got.items] == ["kubernetes", "plain"]
    assert got.items[0].spec.clusterIP == "169.251.2.1"
    assert got.items[1].SerializeToString() == svc("plain").SerializeToString()


def test_object_body_over_the_bound_passes() -> None:
    body = envelope("Service", svc("kubernetes"))
    f = protobodies.ObjectBody(chain(SERVICES), max_bytes=20)
    out = b"".join(f.feed(body[:15])) + b"".join(f.feed(body[15:])) + b"".join(f.finish())
    assert out == body and f.counts.undecodable == 1


def endpoint_slice(name: str, service: str, nodes: list[str]) -> Any:
    return message(
        "EndpointSlice",
        metadata=meta(name, labels={"kubernetes.io/service-name": service}),
        endpoints=[
            message(
                "Endpoint",
                addresses=[f"10.0.0.{i}"],
                conditions=message("EndpointConditions", ready=True, serving=True),
                targetRef=message("ObjectReference", kind="Pod", name=f"p{i}"),
                nodeName=n,
                zone="z",
            )
            for i, n in enumerate(nodes)
        ],
        ports=[message("EndpointPort", name="http", protocol="TCP", port=80)],
        addressType="IPv4",
    )


def slices_chain() -> chaining.Chain:
    return chain(
        ["servicetopology", "forwardkubesvctraffic"],
        services={("default", "svc1"): "kubernetes.io/hostname"},
    )


def test_watch_frames_filtered_one_by_one() -> None:
    mixed = envelope("EndpointSlice", endpoint_slice("svc1-a", "svc1", ["node1", "node2"]))
    other = envelope("EndpointSlice", endpoint_slice("other-a", "other", ["node2"]))
    kube = envelope("EndpointSlice", endpoint_slice("kubernetes", "kubernetes", ["cp1", "cp2"]))
    bookmark = envelope("EndpointSlice", message("EndpointSlice", metadata=meta("")))
    stream = (
        frame("ADDED", mixed)
        + frame("MODIFIED", other)
        + frame("BOOKMARK", bookmark)
        + frame("ADDED", kube)
        + (5).to_bytes(4, "big")
        + b"\xff\xff\xff\xff\xff"
    )
    f = protobodies.WatchStream(slices_chain(), max_event=1 << 20)
    out = b""
    for i in range(0, len(stream), 7):
        out += b"".join(f.feed(stream[i : i + 7]))
    out += b"".join(f.finish())
    got = frames(out[:-9])
    assert out[-9:] == (5).to_bytes(4, "big") + b"\xff\xff\xff\xff\xff"  # undecodable: as it came
    assert [t for t, _ in got] == ["ADDED", "MODIFIED", "BOOKMARK", "ADDED"]
    first = open_envelope(got[0][1], "EndpointSlice")
    assert [e.nodeName for e in first.endpoints] == ["node1"]
    assert first.endpoints[0].targetRef.name == "p0" and first.endpoints[0].zone == "z"
    assert got[1][1] == other and got[2][1] == bookmark
    kubernetes = open_envelope(got[3][1], "EndpointSlice")
    assert [list(e.addresses) for e in kubernetes.endpoints] == [["169.251.2.1"]]
    assert kubernetes.endpoints[0].conditions.ready and kubernetes.ports[0].port == 80
    assert f.counts.undecodable == 1


def test_watch_dropped_object_becomes_deleted_with_the_original() -> None:
    lb = envelope("Service", svc("lb", type_="LoadBalancer", annotations=DISCARD))
    f = protobodies.WatchStream(chain(SERVICES), max_event=1 << 20)
    out = b"".join(f.feed(frame("ADDED", lb)))
    assert frames(out) == [("DELETED", lb)]


def test_watch_frame_over_the_bound_passes_as_it_comes() -> None:
    big = envelope("EndpointSlice", endpoint_slice("svc1-a", "svc1", ["node2"] * 50))
    small = envelope("EndpointSlice", endpoint_slice("svc1-b", "svc1", ["node1", "node2"]))
    stream = frame("ADDED", big) + frame("ADDED", small)
    f = protobodies.WatchStream(slices_chain(), max_event=1000)
    pieces = [b"".join(f.feed(stream[i : i + 100])) for i in range(0, len(stream), 100)]
    got = frames(b"".join(pieces) + b"".join(f.finish()))
    assert got[0] == ("ADDED", big)
    assert len(open_envelope(got[1][1], "EndpointSlice").endpoints) == 1
    assert max(len(p) for p in pieces) <= 1000  # never held whole


def test_pod_env_rewritten_in_protobuf() -> None:
    pod = message(
        "Pod",
        metadata=meta("p"),
        spec=message(
            "PodSpec",
            containers=[
                message(
                    "Container",
                    name="c",
                    image="img",
                    env=[
                        message("EnvVar", name="KUBERNETES_SERVICE_HOST", value="10.0.0.1"),
                        message("EnvVar", name="X", value="y"),
                    ],
                )
            ],
            nodeName="node1",
        ),
    )
    counts = jsonbodies.Counts()
    out, _ = protobodies.filter_object(chain(["serviceenvupdater"]), envelope("Pod", pod), counts)
    got = open_envelope(out, "Pod")
    assert [(e.name, e.value) for e in got.spec.containers[0].env] == [
        ("KUBERNETES_SERVICE_HOST", "169.251.2.1"),
        ("X", "y"),
    ]
    assert got.spec.containers[0].image == "img" and got.spec.nodeName == "node1"


def test_configmap_in_protobuf() -> None:
    cm = message(
        "ConfigMap",
        metadata=meta("kube-proxy", "kube-system"),
        data={"config.conf": "a: 1\n  kubeconfig: /x\n", "z": "zz"},
    )
    counts = jsonbodies.Counts()
    out, _ = protobodies.filter_object(
        chain(["inclusterconfig"]), envelope("ConfigMap", cm), counts
    )
    assert entries(open_envelope(out, "ConfigMap").data) == {
        "config.conf": "a: 1\n  #kubeconfig: /x\n",
        "z": "zz",
    }


def test_negative_ints_and_varints_round_trip() -> None:
    raw = message("ServicePort", name="x", port=-5).SerializeToString()
    decoded = protobodies.decode_message("ServicePort", raw)
    assert decoded["port"] == -5
    assert protobodies.encode_message("ServicePort", decoded) == raw
    assert CLASSES["ServicePort"].FromString(raw).port == -5
