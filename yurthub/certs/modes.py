"""Which identity source the hub uses, decided once from flags and what ``--root-dir`` holds.

PURE: flags and file-existence facts in, a ``Source`` out (or ``ModeError``).

In order:

1. ``--kubeconfig``: the identity is that file, followed as it rotates; no CSRs, no serving
   certificate (so no 10268). For tests and simple setups; combining it with a bootstrap flag
   is an error (two identities, which wins would be a guess).
2. ``--bootstrap-mode=kubeletcertificate``: kubelet's ``kubelet.conf`` and the client
   certificate kubelet rotates are the hub's identity; only the serving certificate is
   requested (with that identity).
3. ``--bootstrap-file`` (a kubeconfig, preferred over ``--join-token`` as in YurtHub) or
   ``--join-token``: the client certificate is requested with it when ``--root-dir`` holds none
   that is usable, then the serving one.
4. Neither, but ``--root-dir`` holds ``yurthub.conf``: an OpenYurt node restarted without its
   bootstrap flags, or after the token expired. Certificates are renewed with the current
   client certificate; once that has expired, only a new token (``POST /v1/token``) helps.
5. Nothing at all: no identity (requests go out anonymous, logged as a warning); the legacy
   default of the earlier releases, kept for plain-HTTP test setups.
"""

from __future__ import annotations

import enum


class ModeError(ValueError):
    """Flags that contradict each other (CLI prints it, exit code 3)."""


class Source(enum.Enum):
    KUBECONFIG = "kubeconfig"
    KUBELET = "kubeletcertificate"
    BOOTSTRAP_FILE = "bootstrap-file"
    JOIN_TOKEN = "join-token"
    EXISTING = "existing"
    NONE = "none"

    @property
    def manages_certificates(self) -> bool:
        """Whether the hub requests and rotates certificates itself."""
        return self not in (Source.KUBECONFIG, Source.NONE)

    @property
    def requests_client_certificate(self) -> bool:
        return self in (Source.BOOTSTRAP_FILE, Source.JOIN_TOKEN, Source.EXISTING)


def resolve(
    *,
    kubeconfig: bool,
    kubelet_mode: bool,
    bootstrap_file: bool,
    join_token: bool,
    hub_kubeconfig_exists: bool,
) -> Source:
    if kubeconfig:
        if kubelet_mode or bootstrap_file or join_token:
            raise ModeError(
                "--kubeconfig gives the hub a fixed identity; it cannot be combined with "
                "--join-token, --bootstrap-file or --bootstrap-mode=kubeletcertificate"
            )
        return Source.KUBECONFIG
    if kubelet_mode:
        return Source.KUBELET
    if bootstrap_file:
        return Source.BOOTSTRAP_FILE
    if join_token:
        return Source.JOIN_TOKEN
    if hub_kubeconfig_exists:
        return Source.EXISTING
    return Source.NONE
