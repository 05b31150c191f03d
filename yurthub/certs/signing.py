"""One certificate signing request, carried out: create it, wait for the signed certificate.

``obtain`` posts the CSR with the given client (bootstrap credentials or the certificate being
renewed), then follows that one object (a watch by name, re-established when it ends) until the
signer put a certificate in its status, it was Denied or Failed, or ``wait_timeout`` passed
(client-go waits 15 minutes). The private key stays in memory with the caller; only the PKCS#10
request goes out. ``on_created`` learns the CSR's name, so ``/v1/readyz`` can name the CSR an
operator has to approve.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import urllib.parse
from collections.abc import Callable
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from yurthub.certs import apiclient, csrs

log = logging.getLogger(__name__)

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
WATCH_SECONDS = 60


class CsrRefused(Exception):
    """Denied or Failed by the cluster (message carries the condition's reason)."""


class CsrTimeout(Exception):
    """Nobody approved (or signed) the CSR in time."""


async def obtain(
    client: apiclient.Client,
    shape: csrs.Shape,
    key: ec.EllipticCurvePrivateKey,
    *,
    expiration_seconds: int,
    wait_timeout: float,
    on_created: Callable[[str], None] = lambda name: None,
) -> tuple[bytes, x509.Certificate]:
    """(signed certificate PEM, its leaf) for ``shape`` and ``key``."""
    body = csrs.csr_object(shape, csrs.request_pem(shape, key), expiration_seconds)
    server, created = await client.request("POST", CSR_PATH, body)
    meta = created.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise apiclient.ApiError(server, 200, "the created CSR has no name")
    on_created(name)
    log.info("created CSR %s for the %s (signer %s)", name, shape.describe(), shape.signer)
    try:
        async with asyncio.timeout(wait_timeout):
            pem = await _wait(client, server, name, created)
    except TimeoutError as e:
        raise CsrTimeout(
            f"CSR {name} was not approved and signed within {wait_timeout:.0f}s "
            f"(kubectl certificate approve {name})"
        ) from e
    leaf = csrs.issued(shape, key, pem, datetime.datetime.now(datetime.UTC))
    return pem, leaf


async def _wait(client: apiclient.Client, server: str, name: str, current: dict[str, Any]) -> bytes:
    selector = urllib.parse.quote(f"metadata.name={name}", safe="")
    while True:
        result = csrs.outcome(current)
        if result.phase is csrs.Phase.ISSUED:
            return result.certificate
        if result.phase in (csrs.Phase.DENIED, csrs.Phase.FAILED):
            raise CsrRefused(f"CSR {name} was {result.phase.value}: {result.reason}")
        rv = str((current.get("metadata") or {}).get("resourceVersion") or "")
        path = f"{CSR_PATH}?fieldSelector={selector}"
        if rv:
            path += f"&resourceVersion={urllib.parse.quote(rv)}"
        try:
            async for event in client.watch(server, path, WATCH_SECONDS):
                obj = event.get("object")
                if event.get("type") in ("ADDED", "MODIFIED") and isinstance(obj, dict):
                    current = obj
                    if csrs.outcome(current).phase is not csrs.Phase.PENDING:
                        break
                elif event.get("type") == "DELETED":
                    raise CsrRefused(f"CSR {name} was deleted before it was signed")
                elif event.get("type") == "ERROR":
                    break  # e.g. 410 Gone: re-read below
        except apiclient.Unreachable as e:
            log.info("watching CSR %s: %s; re-reading it", name, e)
            await asyncio.sleep(1.0)
        if csrs.outcome(current).phase is csrs.Phase.PENDING:
            # The watch ended (timeout, error): read the object as it is now.
            _, current = await client.request("GET", f"{CSR_PATH}/{urllib.parse.quote(name)}")
