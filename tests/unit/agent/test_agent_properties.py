"""Discovery-property resolution rules (reference §4.3) over an in-memory object reader."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest

from discovery.agent import properties


class Objects:
    def __init__(self) -> None:
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads: list[tuple[str, str, str]] = []

    async def get_configmap(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads.append(("ConfigMap", namespace, name))
        return self.configmaps.get((namespace, name))

    async def get_secret(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads.append(("Secret", namespace, name))
        return self.secrets.get((namespace, name))


def ref(kind: str, name: str, key: str, **extra: Any) -> dict[str, Any]:
    return {"name": "P", "valueFrom": {kind: {"name": name, "key": key, **extra}}}


async def test_literal_configmap_binary_secret_and_valueless() -> None:
    objects = Objects()
    objects.configmaps[("default", "cm")] = {
        "data": {"text": "hello"},
        "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()},
    }
    objects.secrets[("ns1", "s")] = {"data": {"pw": base64.b64encode(b"secret").decode()}}
    props = [
        {"name": "LIT", "value": "v"},
        {**ref("configMapKeyRef", "cm", "text"), "name": "TEXT"},
        {**ref("configMapKeyRef", "cm", "bin"), "name": "BIN"},
        {**ref("secretKeyRef", "s", "pw", namespace="ns1"), "name": "PW"},
        {"name": "BARE"},
    ]
    assert await properties.resolve(props, objects) == {
        "LIT": b"v",
        "TEXT": b"hello",
        "BIN": b"\x00\x01",
        "PW": b"secret",
        "BARE": None,
    }
    assert ("ConfigMap", "default", "cm") in objects.reads


@pytest.mark.parametrize("kind", ["configMapKeyRef", "secretKeyRef"])
async def test_missing_object_or_key_optional_is_omitted(kind: str) -> None:
    objects = Objects()
    objects.configmaps[("default", "there")] = {"data": {}}
    objects.secrets[("default", "there")] = {"data": {}}
    props = [ref(kind, "gone", "k", optional=True), ref(kind, "there", "k", optional=True)]
    assert await properties.resolve(props, objects) == {}


@pytest.mark.parametrize(
    ("kind", "source"), [("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")]
)
async def test_missing_required_fails_without_leaking_values(kind: str, source: str) -> None:
    objects = Objects()
    objects.secrets[("default", "s")] = {"data": {"other": base64.b64encode(b"TOPSECRET").decode()}}
    objects.configmaps[("default", "s")] = {"data": {"other": "TOPSECRET"}}
    with pytest.raises(properties.UnsolvableProperty) as info:
        await properties.resolve([ref(kind, "s", "k")], objects)
    assert info.value.source == source
    assert "TOPSECRET" not in str(info.value)
    assert "default/s" in str(info.value)


async def test_property_without_name_is_invalid() -> None:
    with pytest.raises(properties.InvalidProperty):
        await properties.resolve([{"value": "x"}], Objects())


def test_secret_names_are_the_secret_sourced_properties() -> None:
    props = [
        {"name": "A", "value": "x"},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "D"},
    ]
    assert properties.secret_names(props) == {"B"}
    assert properties.secret_names(None) == frozenset()
