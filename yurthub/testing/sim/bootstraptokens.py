"""Bootstrap tokens in the simulated cluster: authentication and the bootstrapsigner.

As a kubeadm cluster has them (our own reading of the API, written apart from the hub's
verifier in ``yurthub.certs.jws`` so the tests do not check the hub against itself):

- a Secret ``kube-system/bootstrap-token-<id>`` of type ``bootstrap.kubernetes.io/token`` with
  ``token-id``, ``token-secret``, ``usage-bootstrap-authentication: "true"`` and an optional
  RFC 3339 ``expiration`` authenticates ``<id>.<secret>`` as ``system:bootstrap:<id>`` in
  ``system:bootstrappers`` plus its ``auth-extra-groups``;
- ``kube-public/cluster-info`` holds ``kubeconfig`` (server + CA) and, for every unexpired
  token with ``usage-bootstrap-signing: "true"``, ``jws-kubeconfig-<id>``: a detached JWS
  (HS256, key = the token secret, header ``{"alg":"HS256","kid":"<id>"}``), kept in step by
  ``State`` whenever such a Secret or the ConfigMap changes (the controller-manager's
  bootstrapsigner); it is readable without credentials (kubeadm's RBAC).

Dangers: token secrets are credentials; never log them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from yurthub.testing.sim import auth, objectmeta

SECRET_TYPE = "bootstrap.kubernetes.io/token"
NAMESPACE = "kube-system"
PREFIX = "bootstrap-token-"
GROUP = "system:bootstrappers"
CLUSTER_INFO = ("kube-public", "cluster-info")
SIGNATURE_PREFIX = "jws-kubeconfig-"
_TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sign_detached(content: str, token_id: str, token_secret: str) -> str:
    """``<header>..<signature>`` of ``content`` with the token (go-jose's compact form)."""
    header = _b64url(json.dumps({"alg": "HS256", "kid": token_id}, separators=(",", ":")).encode())
    payload = _b64url(content.encode("utf-8"))
    mac = hmac.new(token_secret.encode(), f"{header}.{payload}".encode(), hashlib.sha256)
    return f"{header}..{_b64url(mac.digest())}"


def _field(secret: Mapping[str, Any], name: str) -> str:
    data = secret.get("data") or {}
    raw = data.get(name)
    if raw is not None:
        try:
            return base64.b64decode(str(raw)).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return ""
    return str((secret.get("stringData") or {}).get(name, ""))


def _valid(secret: Mapping[str, Any], now: float) -> tuple[str, str] | None:
    """(id, secret) of a well-formed, unexpired bootstrap token Secret."""
    if secret.get("type") != SECRET_TYPE:
        return None
    token_id, token_secret = _field(secret, "token-id"), _field(secret, "token-secret")
    name = str((secret.get("metadata") or {}).get("name", ""))
    if name != f"{PREFIX}{token_id}" or not _TOKEN.match(f"{token_id}.{token_secret}"):
        return None
    expiration = _field(secret, "expiration")
    if expiration:
        when = objectmeta.parse_timestamp(expiration)
        if when is None or when <= now:
            return None
    return token_id, token_secret


def authenticate(token: str, secrets: Iterable[Mapping[str, Any]], now: float) -> auth.User | None:
    m = _TOKEN.match(token)
    if m is None:
        return None
    for secret in secrets:
        found = _valid(secret, now)
        if found is None or found[0] != m.group(1):
            continue
        if not hmac.compare_digest(found[1], m.group(2)):
            return None
        if _field(secret, "usage-bootstrap-authentication") != "true":
            return None
        extra = [g.strip() for g in _field(secret, "auth-extra-groups").split(",") if g.strip()]
        return auth.User(
            f"system:bootstrap:{found[0]}", (*dict.fromkeys([GROUP, *extra]), auth.AUTHENTICATED)
        )
    return None


def cluster_info_kubeconfig(server: str, ca_pem: bytes) -> str:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "",
                "cluster": {
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                    "server": server,
                },
            }
        ],
        "contexts": None,
        "current-context": "",
        "preferences": {},
        "users": None,
    }
    return yaml.safe_dump(doc, sort_keys=True)


def signed_data(
    data: Mapping[str, str], secrets: Iterable[Mapping[str, Any]], now: float
) -> dict[str, str]:
    """``data`` of cluster-info with exactly the signatures the bootstrapsigner would keep."""
    out = {k: v for k, v in data.items() if not k.startswith(SIGNATURE_PREFIX)}
    content = out.get("kubeconfig", "")
    if not content:
        return out
    for secret in secrets:
        found = _valid(secret, now)
        if found is None or _field(secret, "usage-bootstrap-signing") != "true":
            continue
        out[f"{SIGNATURE_PREFIX}{found[0]}"] = sign_detached(content, *found)
    return out
