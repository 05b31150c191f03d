"""Kubernetes protobuf bodies for tests, made with the official protobuf runtime.

An encoder and decoder independent of the hub's own (``yurthub.filters.protobodies``): message
classes built at run time from descriptors written here with the field numbers of the upstream
``generated.proto`` files, for a subset of Service, EndpointSlice, Pod, ConfigMap and the
envelope (``runtime.Unknown``, ``WatchEvent``). They hold more fields than the hub's codec names
(uid, selector, targetPort, image, ...), so tests can see that fields the hub does not read
survive its rewrites.

    body = protomessages.envelope("Service", protomessages.message("Service", metadata=...))
    protomessages.open_envelope(body, "Service").spec.clusterIP
    stream = protomessages.frame("ADDED", body) + ...    # a protobuf watch stream
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _INT, _BOOL, _BYTES, _MSG = (
    _F.TYPE_STRING,
    _F.TYPE_INT32,
    _F.TYPE_BOOL,
    _F.TYPE_BYTES,
    _F.TYPE_MESSAGE,
)
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
PACKAGE = "k8s"

# message -> [(name, number, type, repeated, message type)]
_MESSAGES: dict[str, list[tuple[str, int, int, bool, str]]] = {
    "TypeMeta": [("apiVersion", 1, _STRING, False, ""), ("kind", 2, _STRING, False, "")],
    "Unknown": [
        ("typeMeta", 1, _MSG, False, "TypeMeta"),
        ("raw", 2, _BYTES, False, ""),
        ("contentEncoding", 3, _STRING, False, ""),
        ("contentType", 4, _STRING, False, ""),
    ],
    "StringEntry": [("key", 1, _STRING, False, ""), ("value", 2, _STRING, False, "")],
    "ObjectMeta": [
        ("name", 1, _STRING, False, ""),
        ("namespace", 3, _STRING, False, ""),
        ("uid", 5, _STRING, False, ""),
        ("resourceVersion", 6, _STRING, False, ""),
        ("labels", 11, _MSG, True, "StringEntry"),
        ("annotations", 12, _MSG, True, "StringEntry"),
    ],
    "ListMeta": [("resourceVersion", 2, _STRING, False, "")],
    "IntOrString": [
        ("type", 1, _INT, False, ""),
        ("intVal", 2, _INT, False, ""),
        ("strVal", 3, _STRING, False, ""),
    ],
    "ServicePort": [
        ("name", 1, _STRING, False, ""),
        ("protocol", 2, _STRING, False, ""),
        ("port", 3, _INT, False, ""),
        ("targetPort", 4, _MSG, False, "IntOrString"),
    ],
    "ServiceSpec": [
        ("ports", 1, _MSG, True, "ServicePort"),
        ("selector", 2, _MSG, True, "StringEntry"),
        ("clusterIP", 3, _STRING, False, ""),
        ("type", 4, _STRING, False, ""),
        ("sessionAffinity", 7, _STRING, False, ""),
        ("clusterIPs", 18, _STRING, True, ""),
    ],
    "Service": [
        ("metadata", 1, _MSG, False, "ObjectMeta"),
        ("spec", 2, _MSG, False, "ServiceSpec"),
        ("status", 3, _BYTES, False, ""),
    ],
    "ServiceList": [
        ("metadata", 1, _MSG, False, "ListMeta"),
        ("items", 2, _MSG, True, "Service"),
    ],
    "EndpointConditions": [
        ("ready", 1, _BOOL, False, ""),
        ("serving", 2, _BOOL, False, ""),
    ],
    "ObjectReference": [("kind", 1, _STRING, False, ""), ("name", 3, _STRING, False, "")],
    "Endpoint": [
        ("addresses", 1, _STRING, True, ""),
        ("conditions", 2, _MSG, False, "EndpointConditions"),
        ("targetRef", 4, _MSG, False, "ObjectReference"),
        ("nodeName", 6, _STRING, False, ""),
        ("zone", 7, _STRING, False, ""),
    ],
    "EndpointPort": [
        ("name", 1, _STRING, False, ""),
        ("protocol", 2, _STRING, False, ""),
        ("port", 3, _INT, False, ""),
    ],
    "EndpointSlice": [
        ("metadata", 1, _MSG, False, "ObjectMeta"),
        ("endpoints", 2, _MSG, True, "Endpoint"),
        ("ports", 3, _MSG, True, "EndpointPort"),
        ("addressType", 4, _STRING, False, ""),
    ],
    "EndpointSliceList": [
        ("metadata", 1, _MSG, False, "ListMeta"),
        ("items", 2, _MSG, True, "EndpointSlice"),
    ],
    "EnvVar": [("name", 1, _STRING, False, ""), ("value", 2, _STRING, False, "")],
    "Container": [
        ("name", 1, _STRING, False, ""),
        ("image", 2, _STRING, False, ""),
        ("env", 7, _MSG, True, "EnvVar"),
    ],
    "PodSpec": [
        ("containers", 2, _MSG, True, "Container"),
        ("nodeName", 10, _STRING, False, ""),
        ("initContainers", 20, _MSG, True, "Container"),
    ],
    "Pod": [("metadata", 1, _MSG, False, "ObjectMeta"), ("spec", 2, _MSG, False, "PodSpec")],
    "ConfigMap": [
        ("metadata", 1, _MSG, False, "ObjectMeta"),
        ("data", 2, _MSG, True, "StringEntry"),
    ],
    "RawExtension": [("raw", 1, _BYTES, False, "")],
    "WatchEvent": [("type", 1, _STRING, False, ""), ("object", 2, _MSG, False, "RawExtension")],
}


def _build() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(name="k8s_test.proto", package=PACKAGE)
    proto.syntax = "proto2"
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, repeated, type_name in fields:
            f = message.field.add(
                name=field, number=number, type=kind, label=_REP if repeated else _OPT
            )
            if type_name:
                f.type_name = f".{PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in _MESSAGES
    }


CLASSES = _build()


def message(message_name: str, /, **fields: Any) -> Any:
    """A message; dict values for ``StringEntry`` fields become entries."""
    cls = CLASSES[message_name]
    out = cls()
    for key, value in fields.items():
        if isinstance(value, dict) and key in ("labels", "annotations", "selector", "data"):
            for k, v in value.items():
                getattr(out, key).add(key=k, value=v)
        elif isinstance(value, list):
            getattr(out, key).extend(value)
        elif hasattr(value, "SerializeToString"):
            getattr(out, key).CopyFrom(value)
        else:
            setattr(out, key, value)
    return out


def envelope(kind: str, obj: Any, api_version: str = "v1") -> bytes:
    unknown = message(
        "Unknown",
        typeMeta=message("TypeMeta", apiVersion=api_version, kind=kind),
        raw=obj.SerializeToString(),
        contentEncoding="",
        contentType="",
    )
    return b"k8s\x00" + bytes(unknown.SerializeToString())


def open_envelope(body: bytes, name: str) -> Any:
    assert body.startswith(b"k8s\x00")
    unknown = CLASSES["Unknown"].FromString(body[4:])
    return CLASSES[name].FromString(unknown.raw)


def entries(field: Any) -> dict[str, str]:
    return {e.key: e.value for e in field}


def frame(event_type: str, obj_body: bytes) -> bytes:
    event = message("WatchEvent", type=event_type, object=message("RawExtension", raw=obj_body))
    data = bytes(event.SerializeToString())
    return len(data).to_bytes(4, "big") + data


def frames(stream: bytes) -> list[tuple[str, bytes]]:
    out = []
    pos = 0
    while pos < len(stream):
        length = int.from_bytes(stream[pos : pos + 4], "big")
        event = CLASSES["WatchEvent"].FromString(stream[pos + 4 : pos + 4 + length])
        out.append((event.type, event.object.raw))
        pos += 4 + length
    return out
