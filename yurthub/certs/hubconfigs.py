"""The two kubeconfigs the hub writes under ``--root-dir`` (YurtHub's shapes, reference §7).

PURE: text in, text out.

- ``yurthub.conf``: the cluster (server + ``pki/ca.crt`` by path) and the client pair
  ``pki/yurthub-current.pem`` by path, as both certificate and key. Naming files (not embedding
  them) is what lets a rotation be one symlink swap that ``kubeconfigs``/``Upstream`` notice.
- ``bootstrap-hub.conf``: the cluster (CA embedded) and the join token, user
  ``token-bootstrap-client``: what the first CSR is sent with. It holds a credential: 0600.
"""

from __future__ import annotations

import base64
import pathlib
from typing import Any

import yaml

CLUSTER = "default-cluster"
CONTEXT = "default-context"
HUB_USER = "default-auth"
BOOTSTRAP_USER = "token-bootstrap-client"


def _config(cluster: dict[str, Any], user_name: str, user: dict[str, Any]) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER, "cluster": cluster}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CLUSTER, "user": user_name}}],
        "current-context": CONTEXT,
        "users": [{"name": user_name, "user": user}],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def hub_kubeconfig(server: str, ca_file: pathlib.Path, pair_file: pathlib.Path) -> str:
    return _config(
        {"server": server, "certificate-authority": str(ca_file)},
        HUB_USER,
        {"client-certificate": str(pair_file), "client-key": str(pair_file)},
    )


def bootstrap_kubeconfig(server: str, ca_pem: bytes, token: str) -> str:
    return _config(
        {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode("ascii"),
        },
        BOOTSTRAP_USER,
        {"token": token},
    )
