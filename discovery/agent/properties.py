"""Discovery-property resolution: a Configuration's discoveryProperties -> DiscoverRequest map.

Per property, in order (reference §4.3): a literal ``value``; else
``valueFrom.configMapKeyRef`` (``data[key]`` as UTF-8, else
``binaryData[key]``); else ``valueFrom.secretKeyRef`` (``data[key]``,
base64-decoded); else the key with no value (``ByteData`` without ``vec``).
A missing object or key omits the property when ``optional`` is true and
fails with ``UnsolvableProperty`` otherwise. The referenced namespace defaults
to ``"default"`` (Akri's rule, not the Configuration's namespace).

The registry calls the provider before every Discover, so a rotated Secret
reaches the handler on its next query without restarting anything.

Danger: resolved values can be Secret payloads. They are returned as bytes
to the registry and never logged; error messages name the object and key only.
``secret_names`` tells which properties came from a Secret, so the agent can keep
their values out of world-readable files (CDI specs) when a handler copies them
into a device's properties.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

DEFAULT_NAMESPACE = "default"

# name -> bytes, or None for a property sent without a value.
Resolved = dict[str, bytes | None]
Provider = Callable[[], Awaitable[Resolved]]


class UnsolvableProperty(LookupError):
    def __init__(self, source: str, namespace: str, name: str, key: str) -> None:
        super().__init__(f"{source} {namespace}/{name} has no key {key!r}")
        self.source = source


class InvalidProperty(ValueError):
    """A property whose shape the CRD should have rejected."""


class ObjectReader(Protocol):
    """Reads ConfigMaps and Secrets; ``None`` when the object does not exist."""

    async def get_configmap(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    async def get_secret(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


def _decode_b64(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _from_configmap(obj: Mapping[str, Any] | None, key: str) -> bytes | None:
    if obj is None:
        return None
    data = obj.get("data") or {}
    if isinstance(data.get(key), str):
        return str(data[key]).encode()
    return _decode_b64((obj.get("binaryData") or {}).get(key))


def _from_secret(obj: Mapping[str, Any] | None, key: str) -> bytes | None:
    if obj is None:
        return None
    value = _decode_b64((obj.get("data") or {}).get(key))
    if value is not None:
        return value
    # The apiserver folds stringData into data; be lenient with servers that do not.
    string_data = obj.get("stringData") or {}
    return str(string_data[key]).encode() if isinstance(string_data.get(key), str) else None


def secret_names(properties: Sequence[Mapping[str, Any]] | None) -> frozenset[str]:
    """Names of the properties whose value comes from a Secret (``secretKeyRef``)."""
    names = set()
    for prop in properties or ():
        value_from = prop.get("valueFrom") or {}
        name = prop.get("name")
        if (
            isinstance(name, str)
            and prop.get("value") is None
            and isinstance(value_from, Mapping)
            and value_from.get("configMapKeyRef") is None
            and value_from.get("secretKeyRef") is not None
        ):
            names.add(name)
    return frozenset(names)


async def resolve(properties: Sequence[Mapping[str, Any]] | None, reader: ObjectReader) -> Resolved:
    resolved: Resolved = {}
    for prop in properties or ():
        name = prop.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidProperty("a discoveryProperty has no name")
        if prop.get("value") is not None:
            resolved[name] = str(prop["value"]).encode()
            continue
        value_from = prop.get("valueFrom") or {}
        for field, source in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = value_from.get(field)
            if ref is None:
                continue
            ref_name, key = ref.get("name"), ref.get("key")
            if not isinstance(ref_name, str) or not isinstance(key, str):
                raise InvalidProperty(f"discoveryProperty {name}: {field} needs name and key")
            namespace = ref.get("namespace") or DEFAULT_NAMESPACE
            if source == "ConfigMap":
                value = _from_configmap(await reader.get_configmap(namespace, ref_name), key)
            else:
                value = _from_secret(await reader.get_secret(namespace, ref_name), key)
            if value is not None:
                resolved[name] = value
            elif not ref.get("optional", False):
                raise UnsolvableProperty(source, namespace, ref_name, key)
            break
        else:
            resolved[name] = None
    return resolved
