"""ONVIF camera credentials from ``discoveryProperties`` (Akri ``credential_store.rs``).

Sources, applied in this order (later ones override earlier ones for the same uuid):

1. ``device_credential_list``: a JSON list of property names; each names a property holding
   a JSON map ``uuid -> {"username": ..., "password": ..., "base64encoded": bool}``.
2. ``device_credential_ref_list``: a JSON list of property names; each names a property
   holding a JSON map ``uuid -> {"username_ref": <property>, "password_ref": <property>}``.
3. ``username_<uuid>`` / ``password_<uuid>`` with ``-`` in the uuid written as ``_``, and
   ``username_default`` / ``password_default``.

A lookup falls back to the ``default`` entry. Values that are not UTF-8 or not valid JSON
are ignored with a warning that names the property, never its value.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT = "default"


@dataclasses.dataclass(frozen=True, slots=True)
class Credential:
    username: str
    password: str | None = None

    def __repr__(self) -> str:  # never print a password
        return f"Credential(username={self.username!r}, password=***)"


def _text(properties: Mapping[str, bytes], key: str) -> str | None:
    raw = properties.get(key)
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        logger.warning("ignoring discovery property %s: not UTF-8", key)
        return None


def _json(properties: Mapping[str, bytes], key: str) -> Any:
    value = _text(properties, key)
    if value is None:
        return None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):  # json's parser recurses: nesting ends in the latter
        logger.warning("ignoring discovery property %s: not valid JSON", key)
        return None


def _names(properties: Mapping[str, bytes], key: str) -> list[str]:
    value = _json(properties, key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        logger.warning("ignoring discovery property %s: expected a JSON list of names", key)
        return []
    return value


def _entries(properties: Mapping[str, bytes], key: str) -> dict[str, dict[str, Any]]:
    value = _json(properties, key)
    if not isinstance(value, dict):
        if value is not None:
            logger.warning("ignoring discovery property %s: expected a JSON object", key)
        return {}
    return {str(k).lower(): v for k, v in value.items() if isinstance(v, dict)}


def load(properties: Mapping[str, bytes]) -> dict[str, Credential]:
    """All credentials by lower-case uuid (``default`` for the fallback)."""
    store: dict[str, Credential] = {}
    for name in _names(properties, "device_credential_list"):
        for uuid, entry in _entries(properties, name).items():
            username = entry.get("username")
            if not isinstance(username, str):
                logger.warning("ignoring credential for %s in %s: no username", uuid, name)
                continue
            password = entry.get("password")
            if not isinstance(password, str):
                password = None
            elif entry.get("base64encoded") is True:
                try:
                    password = base64.b64decode(password, validate=True).decode("utf-8")
                except (binascii.Error, UnicodeDecodeError):
                    logger.warning("ignoring credential for %s in %s: bad base64", uuid, name)
                    continue
            store[uuid] = Credential(username, password)
    for name in _names(properties, "device_credential_ref_list"):
        for uuid, entry in _entries(properties, name).items():
            username_ref = entry.get("username_ref")
            password_ref = entry.get("password_ref")
            username = _text(properties, username_ref) if isinstance(username_ref, str) else None
            if username is None:
                logger.warning("ignoring credential ref for %s in %s: no username", uuid, name)
                continue
            password = _text(properties, password_ref) if isinstance(password_ref, str) else None
            store[uuid] = Credential(username, password)
    for key in properties:
        if not key.startswith("username_"):
            continue
        uuid = key.removeprefix("username_")
        username = _text(properties, key)
        if username is None:
            continue
        password = _text(properties, f"password_{uuid}")
        store[uuid.replace("_", "-").lower() if uuid != DEFAULT else DEFAULT] = Credential(
            username, password
        )
    return store


def lookup(store: Mapping[str, Credential], device_uuid: str) -> Credential | None:
    return store.get(device_uuid.lower()) or store.get(DEFAULT)
