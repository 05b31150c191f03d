"""Where a process in a Pod finds its apiserver and ServiceAccount: pure data, no I/O.

``ServiceAccount`` names the projected token directory (``token``, ``ca.crt``) that
``kubeapi.connect`` reads; ``service_host`` turns ``KUBERNETES_SERVICE_HOST``/``_PORT`` into
the apiserver URL the way client-go's in-cluster config does (IPv6 hosts bracketed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceAccount:
    """A Pod's ServiceAccount credentials: ``token`` and ``ca.crt`` in ``directory``."""

    directory: Path = SERVICE_ACCOUNT_DIR
    server: str | None = None
    """``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``; an explicit URL given to
    ``kubeapi.connect`` (e.g. the hub's proxy) takes precedence."""
    token_reload: float = 60.0
    """Seconds between re-reads of the token file: kubelet rotates the projected token
    (valid 1 h, replaced at 80 %), so a token read once would expire."""


def service_host(environ: Mapping[str, str]) -> str | None:
    """The in-cluster apiserver URL from the environment kubelet gives every container."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def in_cluster(directory: Path, environ: Mapping[str, str]) -> ServiceAccount | None:
    """The Pod's ServiceAccount when its token is mounted in ``directory``, else None."""
    if not (directory / "token").is_file():
        return None
    return ServiceAccount(directory=directory, server=service_host(environ))
