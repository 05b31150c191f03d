"""The hub's certificates as ``/v1/status`` lists them (and the expiry metric reads them).

The ones the certificate manager requests (client, serving), else the client certificate of
``--kubeconfig``: name, file, subject, notAfter and seconds to go, which data key seals the
private key (``keySealedWith``; null: plain PEM), or the problem that keeps one from being
there. Subjects, files and dates only, never a key. No I/O: what the manager and
the loaded identity hold in memory; ``now`` passed in.
"""

from __future__ import annotations

import datetime
from typing import Any

from yurthub import kubeconfigs
from yurthub.certs import manager


def _iso(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def certificates(
    certs: manager.CertManager | None, identity: kubeconfigs.Identity | None, now: float
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if certs is not None:
        pairs = (
            ("client", certs.client_pair, certs.client_problem),
            ("serving", certs.serving_pair, certs.serving_problem),
        )
        for name, pair, problem in pairs:
            if name == "client" and not certs.source.requests_client_certificate:
                continue
            entry: dict[str, Any] = {"name": name, "problem": problem}
            if pair is not None:
                not_after = pair.validity.not_after.timestamp()
                entry.update(
                    file=str(pair.path),
                    subject=pair.certificate.subject.rfc4514_string(),
                    notAfter=_iso(not_after),
                    expiresInSeconds=round(not_after - now),
                    keySealedWith=pair.key_id,
                )
            out.append(entry)
    own_client = certs is not None and certs.source.requests_client_certificate
    if (
        not own_client
        and identity is not None
        and identity.has_client_cert
        and identity.not_after is not None
    ):
        not_after = identity.not_after.timestamp()
        out.insert(
            0,
            {
                "name": "client",
                "problem": "",
                "file": str(identity.files[0].path) if identity.files else "",
                "subject": f"CN={identity.subject}",
                "notAfter": _iso(not_after),
                "expiresInSeconds": round(not_after - now),
            },
        )
    return out
