"""Conversions between plain values (``discovery.devices``) and the ``v0`` protobuf messages.

The only module besides the servers/clients in ``sdk``/``registry`` that touches generated
protobuf classes, so handlers and the agent work with frozen dataclasses.

Properties: the wire carries ``map<string, ByteData>`` whose ``optional bytes vec`` may be
unset (Akri sends a key without a value when a property has neither ``value`` nor
``valueFrom``). Towards handlers an unset value becomes ``b""``; towards the wire ``None``
becomes an unset ``vec``.

Failures: :func:`describe_failure` turns a failed call into one line naming the peer. A peer
that *resets* the stream (HTTP/2 ``RST_STREAM``) is named as such, with the HTTP/2 error: grpc
reports it only as ``INTERNAL``/``UNAVAILABLE`` with the error code as a number in the details,
and a reset means the peer refused our request itself (e.g. h2's PROTOCOL_ERROR for a malformed
``:authority``), not that it is away.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import grpc
import grpc.aio

from discovery import devices
from discovery.proto import discovery_pb2

UDS = discovery_pb2.RegisterDiscoveryHandlerRequest.EndpointType.UDS
NETWORK = discovery_pb2.RegisterDiscoveryHandlerRequest.EndpointType.NETWORK

H2_ERRORS = (
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
)
"""HTTP/2 error codes by number (RFC 9113, section 7)."""

_RESET = re.compile(r"RST_STREAM\b.*?\bcode\D{0,3}(\d+)", re.IGNORECASE | re.DOTALL)

# Method paths (package v0), for clients that call them without generated stubs.
REGISTER_METHOD = "/v0.Registration/RegisterDiscoveryHandler"
DISCOVER_METHOD = "/v0.DiscoveryHandler/Discover"


def device_to_pb(device: devices.Device) -> discovery_pb2.Device:
    return discovery_pb2.Device(
        id=device.id,
        properties=dict(device.properties),
        mounts=[
            discovery_pb2.Mount(
                container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
            )
            for m in device.mounts
        ],
        device_specs=[
            discovery_pb2.DeviceSpec(
                container_path=s.container_path, host_path=s.host_path, permissions=s.permissions
            )
            for s in device.device_specs
        ],
    )


def device_from_pb(message: discovery_pb2.Device) -> devices.Device:
    return devices.Device(
        id=message.id,
        properties=dict(message.properties),
        mounts=tuple(
            devices.Mount(m.container_path, m.host_path, m.read_only) for m in message.mounts
        ),
        device_specs=tuple(
            devices.DeviceSpec(s.container_path, s.host_path, s.permissions)
            for s in message.device_specs
        ),
    )


def response(device_list: Iterable[devices.Device]) -> discovery_pb2.DiscoverResponse:
    return discovery_pb2.DiscoverResponse(devices=[device_to_pb(d) for d in device_list])


def devices_from_response(message: discovery_pb2.DiscoverResponse) -> list[devices.Device]:
    return [device_from_pb(d) for d in message.devices]


def discover_request(
    details: str, properties: Mapping[str, bytes | None]
) -> discovery_pb2.DiscoverRequest:
    return discovery_pb2.DiscoverRequest(
        discovery_details=details,
        discovery_properties={
            key: discovery_pb2.ByteData() if value is None else discovery_pb2.ByteData(vec=value)
            for key, value in properties.items()
        },
    )


def properties_from_request(message: discovery_pb2.DiscoverRequest) -> dict[str, bytes]:
    return {key: value.vec for key, value in message.discovery_properties.items()}


def register_request(
    name: str, endpoint: str, network: bool, shared: bool
) -> discovery_pb2.RegisterDiscoveryHandlerRequest:
    return discovery_pb2.RegisterDiscoveryHandlerRequest(
        name=name, endpoint=endpoint, endpoint_type=NETWORK if network else UDS, shared=shared
    )


# gRPC plumbing without the generated ``*_pb2_grpc`` module (it is untyped): the same method
# paths and (de)serializers, so the registry and the SDK stay mypy --strict clean.


def discovery_handler_service(discover: Any) -> Any:
    """A generic handler serving ``v0.DiscoveryHandler/Discover`` with ``discover``
    (``async (DiscoverRequest, ServicerContext) -> None``, writing with ``context.write``)."""
    return grpc.method_handlers_generic_handler(
        "v0.DiscoveryHandler",
        {
            "Discover": grpc.unary_stream_rpc_method_handler(
                discover,
                request_deserializer=discovery_pb2.DiscoverRequest.FromString,
                response_serializer=discovery_pb2.DiscoverResponse.SerializeToString,
            )
        },
    )


def registration_service(register: Any) -> Any:
    """A generic handler serving ``v0.Registration/RegisterDiscoveryHandler`` with
    ``register`` (``async (RegisterDiscoveryHandlerRequest, ServicerContext) -> Empty``)."""
    return grpc.method_handlers_generic_handler(
        "v0.Registration",
        {
            "RegisterDiscoveryHandler": grpc.unary_unary_rpc_method_handler(
                register,
                request_deserializer=discovery_pb2.RegisterDiscoveryHandlerRequest.FromString,
                response_serializer=discovery_pb2.Empty.SerializeToString,
            )
        },
    )


def register_call(channel: grpc.aio.Channel) -> Any:
    return channel.unary_unary(
        REGISTER_METHOD,
        request_serializer=discovery_pb2.RegisterDiscoveryHandlerRequest.SerializeToString,
        response_deserializer=discovery_pb2.Empty.FromString,
    )


def discover_call(channel: grpc.aio.Channel) -> Any:
    return channel.unary_stream(
        DISCOVER_METHOD,
        request_serializer=discovery_pb2.DiscoverRequest.SerializeToString,
        response_deserializer=discovery_pb2.DiscoverResponse.FromString,
    )


def reset_error(rpc_details: str | None) -> str | None:
    """PURE: the HTTP/2 error name if grpc's ``rpc_details`` say the peer reset the stream
    (``None`` otherwise); an unknown code is named by its number."""
    match = _RESET.search(rpc_details or "")
    if match is None:
        return None
    number = int(match.group(1))
    return H2_ERRORS[number] if number < len(H2_ERRORS) else f"error code {number}"


def describe_failure(peer: str, code: str, rpc_details: str | None) -> str:
    """PURE: one line for a failed call to ``peer`` (e.g. ``handler at /run/x.sock``) that
    ended with status ``code`` (a ``grpc.StatusCode`` name) and ``rpc_details``."""
    text = rpc_details or "no details"
    reset = reset_error(rpc_details)
    if reset is not None:
        return f"{peer} reset the stream ({reset}): {code}: {text}"
    return f"{peer} failed the call: {code}: {text}"
