"""Kubeconfig files for the simulated apiserver: CA data embedded, client cert or bearer token.

Written with mode 0600 because they carry credentials.
"""

from __future__ import annotations

import base64
import os
import pathlib
from typing import Any

import yaml


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def render(
    *,
    server: str,
    ca_pem: bytes,
    user: str,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
    token: str | None = None,
    cluster: str = "simapiserver",
) -> str:
    credentials: dict[str, Any] = {}
    if cert_pem is not None and key_pem is not None:
        credentials["client-certificate-data"] = _b64(cert_pem)
        credentials["client-key-data"] = _b64(key_pem)
    if token is not None:
        credentials["token"] = token
    context = f"{user}@{cluster}"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": cluster, "user": user, "namespace": "default"},
            }
        ],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def write(path: pathlib.Path, text: str) -> pathlib.Path:
    """Write ``text`` to ``path`` atomically with mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
