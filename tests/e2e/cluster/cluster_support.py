"""Helpers of the real-cluster suite: token kubeconfigs, JSON reads."""

from __future__ import annotations

import base64
import json
import pathlib

import yaml

from yurthub.testing import realcluster

REPO = pathlib.Path(__file__).resolve().parents[3]


def token_kubeconfig(
    path: pathlib.Path, server: str, token: str, ca: bytes | None = None
) -> pathlib.Path:
    """A kubeconfig for ``server`` with a bearer ``token`` (and a CA when https)."""
    cluster: dict[str, object] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def get_json(cluster: realcluster.RealCluster, *args: str) -> dict[str, object]:
    out: dict[str, object] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return out
