"""Decoding Kubernetes protobuf request bodies (what kubectl's typed clients send) into JSON
dicts: the simulator and the hub read them with ``yurthub.kubeproto.converting`` (the one
protobuf decoder of the project; its conversions are table-tested against the real apiserver
in tests/unit/kubeproto)."""

from __future__ import annotations

import pytest

from yurthub.kubeproto import converting
from yurthub.testing.sim import bodies, errors, negotiation

CONVERTER = converting.Converter()


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def f(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return converting.MAGIC + f(1, f(1, api_version) + f(2, kind)) + f(2, raw) + f(3, "") + f(4, "")


def meta(name: str, *extra: bytes) -> bytes:
    # gogo writes every non-pointer scalar, empty or not.
    return f(1, name) + f(2, "") + f(3, "") + f(5, "") + f(7, 0) + f(8, b"") + b"".join(extra)


def test_deployment_as_kubectl_create_sends_it() -> None:
    labels = f(11, f(1, "app") + f(2, "d1"))
    container = f(1, "nginx") + f(2, "nginx:1.27") + f(6, f(3, 80)) + f(8, b"") + f(16, 0)
    pod_spec = f(2, container) + f(3, "") + f(11, 0)
    template = f(1, meta("", labels)) + f(2, pod_spec)
    spec = f(1, 0) + f(2, f(1, f(1, "app") + f(2, "d1"))) + f(3, template) + f(4, f(1, ""))
    body = envelope("apps/v1", "Deployment", f(1, meta("d1", labels)) + f(2, spec) + f(3, f(1, 0)))
    assert CONVERTER.object(body) == {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {"name": "d1", "labels": {"app": "d1"}},
        "spec": {
            "replicas": 0,  # a pointer upstream: present means "set", even to zero
            "selector": {"matchLabels": {"app": "d1"}},
            "template": {
                "metadata": {"labels": {"app": "d1"}},
                "spec": {
                    "containers": [
                        {
                            "name": "nginx",
                            "image": "nginx:1.27",
                            "ports": [{"containerPort": 80}],
                            "resources": {},
                        }
                    ]
                },
            },
            "strategy": {},
        },
        "status": {},  # a non-pointer struct: Go writes it, empty
    }


def test_secret_bytes_service_int_or_string_and_times() -> None:
    secret = envelope(
        "v1", "Secret", f(1, meta("s")) + f(2, f(1, "k") + f(2, b"\x00\xff")) + f(3, "Opaque")
    )
    assert CONVERTER.object(secret)["data"] == {"k": "AP8="}
    port = f(1, "http") + f(3, 80) + f(4, f(1, 1) + f(3, "web"))
    svc = CONVERTER.object(envelope("v1", "Service", f(1, meta("svc")) + f(2, f(1, port))))
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "web"}]
    lease_spec = f(1, "node-1") + f(2, 40) + f(4, f(1, 1_700_000_000) + f(2, 500_000_000))
    lease = CONVERTER.object(
        envelope("coordination.k8s.io/v1", "Lease", f(1, meta("l")) + f(2, lease_spec))
    )
    assert lease["spec"] == {
        "holderIdentity": "node-1",
        "leaseDurationSeconds": 40,
        "renewTime": "2023-11-14T22:13:20.500000Z",
    }


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"not protobuf", "magic"),
        (envelope("example.com/v1", "Widget", b""), "example.com/v1/Widget: not a kind"),
        (envelope("v1", "ConfigMap", f(1, meta("c")) + b"\x12\x02\xff\xfe"), "v1/ConfigMap: does"),
        (envelope("v1", "Pod", f(1, meta("p")) + f(2, f(1, b"volume"))), "v1/Pod: does not"),
        (converting.MAGIC + b"\x0a\xff", "corrupt envelope"),
    ],
)
def test_undecodable_bodies_are_clear_415s(body: bytes, fragment: str) -> None:
    with pytest.raises(converting.Undecodable, match=fragment):
        CONVERTER.object(body)
    # The simulator answers them 415, naming what it could not read.
    with pytest.raises(errors.ApiError) as e:
        bodies.decode(body, negotiation.BodyFormat.PROTOBUF, CONVERTER)
    assert e.value.code == 415
    assert fragment in str(e.value)


def test_delete_options_from_a_go_client() -> None:
    body = envelope("v1", "DeleteOptions", f(1, 0) + f(2, f(1, "uid-1")) + f(4, "Orphan"))
    assert CONVERTER.object(body) == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": "uid-1"},
        "propagationPolicy": "Orphan",
    }
