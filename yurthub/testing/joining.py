"""Test toolkit for a hub joining a cluster: bootstrap tokens, the CA pin, a CSR approver.

Works against any apiserver (the simulated one or a real one) through its HTTP API, with an
admin kubeconfig, as an operator would with ``kubeadm token create`` and ``kubectl certificate
approve``::

    admin = joining.Admin.from_kubeconfig(path)
    token = joining.new_token()
    await admin.create_bootstrap_token(token)             # kube-system/bootstrap-token-<id>
    pin = joining.ca_pin(ca_pem)                          # --discovery-token-ca-cert-hash
    async with joining.approving(admin, node_name="edge-1") as approver:
        ...                                               # the hub's CSRs get approved
        approver.approved                                 # names of what it approved

The approver approves only the hub's two shapes for ``node_name`` (signer and CN checked);
``deny=True`` denies them instead (failure tests). Until ``edgehub manager`` approves hub CSRs
in a cluster, tests use this.

Dangers: the admin kubeconfig and tokens are credentials; nothing here logs them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import hashlib
import json
import pathlib
import secrets
import ssl
import string
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from yurthub import kubeconfigs

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
HUB_SIGNERS = ("kubernetes.io/kube-apiserver-client", "kubernetes.io/kubelet-serving")
_ALPHABET = string.ascii_lowercase + string.digits


def new_token() -> str:
    """A random bootstrap token ``<6>.<16>`` of ``[a-z0-9]``."""

    def pick(n: int) -> str:
        return "".join(secrets.choice(_ALPHABET) for _ in range(n))

    return f"{pick(6)}.{pick(16)}"


def token_secret(
    token: str,
    *,
    signing: bool = True,
    authentication: bool = True,
    expiration: datetime.datetime | None = None,
    extra_groups: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The ``kube-system/bootstrap-token-<id>`` Secret, as ``kubeadm token create`` makes it."""
    token_id, secret = token.split(".", 1)
    data = {
        "token-id": token_id,
        "token-secret": secret,
        "usage-bootstrap-authentication": "true" if authentication else "false",
        "usage-bootstrap-signing": "true" if signing else "false",
    }
    if expiration is not None:
        data["expiration"] = expiration.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if extra_groups:
        data["auth-extra-groups"] = ",".join(extra_groups)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def ca_pin(ca_pem: bytes) -> str:
    """``sha256:<hex>`` of the CA's SubjectPublicKeyInfo (kubeadm's CA certificate hash)."""
    cert = x509.load_pem_x509_certificates(ca_pem)[0]
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"sha256:{hashlib.sha256(spki).hexdigest()}"


class ApiFailure(AssertionError):
    def __init__(self, method: str, path: str, status: int, body: bytes) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300].decode(errors='replace')}")
        self.status = status


@dataclasses.dataclass
class Admin:
    """The cluster as its admin: a few JSON calls."""

    server: str
    context: ssl.SSLContext | bool
    headers: dict[str, str]

    @classmethod
    def from_kubeconfig(cls, path: pathlib.Path, server: str = "") -> Admin:
        identity = kubeconfigs.load(path)
        url = (server or identity.server).rstrip("/")
        ctx: ssl.SSLContext | bool = False if url.startswith("http://") else identity.with_identity
        return cls(url, ctx, identity.auth_headers())

    async def call(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json", **self.headers}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method, self.server + path, data=data, headers=headers, ssl=self.context
            ) as resp,
        ):
            raw = await resp.read()
            if resp.status >= 400:
                raise ApiFailure(method, path, resp.status, raw)
            decoded = json.loads(raw) if raw else {}
            assert isinstance(decoded, dict)
            return decoded

    async def create_bootstrap_token(self, token: str, **kwargs: Any) -> None:
        await self.call(
            "POST", "/api/v1/namespaces/kube-system/secrets", token_secret(token, **kwargs)
        )

    async def delete_bootstrap_token(self, token: str) -> None:
        token_id = token.split(".", 1)[0]
        await self.call(
            "DELETE", f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token_id}"
        )

    async def csrs(self) -> list[dict[str, Any]]:
        items = (await self.call("GET", CSR_PATH)).get("items") or []
        return [i for i in items if isinstance(i, dict)]

    async def decide(self, csr: Mapping[str, Any], *, approve: bool, message: str) -> None:
        name = str(csr["metadata"]["name"])
        obj = json.loads(json.dumps(csr))
        condition = {
            "type": "Approved" if approve else "Denied",
            "status": "True",
            "reason": "EdgehubTest" if approve else "EdgehubTestDenied",
            "message": message,
            "lastUpdateTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        obj.setdefault("status", {}).setdefault("conditions", []).append(condition)
        await self.call("PUT", f"{CSR_PATH}/{name}/approval", obj)


def hub_csr_for(csr: Mapping[str, Any], node_name: str) -> bool:
    """Whether ``csr`` is one of the two a hub of ``node_name`` sends (signer and CN)."""
    spec = csr.get("spec") or {}
    if spec.get("signerName") not in HUB_SIGNERS:
        return False
    try:
        request = x509.load_pem_x509_csr(base64.b64decode(str(spec.get("request", ""))))
    except ValueError:
        return False
    names = [str(a.value) for a in request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return names == [f"system:node:{node_name}"]


def _decided(csr: Mapping[str, Any]) -> bool:
    conditions = (csr.get("status") or {}).get("conditions") or []
    return any(c.get("type") in ("Approved", "Denied", "Failed") for c in conditions)


@dataclasses.dataclass
class Approver:
    admin: Admin
    node_name: str
    deny: bool = False
    approved: list[str] = dataclasses.field(default_factory=list)
    denied: list[str] = dataclasses.field(default_factory=list)
    interval: float = 0.2

    async def run(self) -> None:
        while True:
            try:
                pending = await self.admin.csrs()
            except (aiohttp.ClientError, OSError, ApiFailure):
                pending = []  # the apiserver is away for a moment (restart tests)
            for csr in pending:
                if _decided(csr) or not hub_csr_for(csr, self.node_name):
                    continue
                name = str(csr["metadata"]["name"])
                with contextlib.suppress(ApiFailure, aiohttp.ClientError, OSError):
                    await self.admin.decide(
                        csr, approve=not self.deny, message=f"test approver for {self.node_name}"
                    )
                    (self.denied if self.deny else self.approved).append(name)
            await asyncio.sleep(self.interval)


@contextlib.asynccontextmanager
async def approving(admin: Admin, *, node_name: str, deny: bool = False) -> AsyncIterator[Approver]:
    approver = Approver(admin, node_name, deny)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(approver.run(), name=f"test-csr-approver-{node_name}")
        try:
            yield approver
        finally:
            task.cancel()
