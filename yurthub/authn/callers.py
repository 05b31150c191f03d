"""Who a request comes from, as far as the hub can tell, and what it may do.

PURE: listener, headers and the TLS peer's subject in, a ``Decision`` out.

- **plain proxy (10261, loopback)**: a request with ``Authorization: Bearer`` speaks for that
  token (forwarded as it came); any other request is the node's own (kubelet, kube-proxy via
  its kubeconfig, the hub itself) and goes out with the hub's identity, as in YurtHub.
- **secure proxy (10268, TLS)**: the caller must prove something. A Bearer token (pods; the
  ``masterservice`` rewrite points in-cluster clients here) is forwarded as it came; a client
  certificate signed by the cluster CA naming this node (``system:node:<node>``) is the node
  itself. Any other certificate is 403 (the hub can only lend this node's identity, and would
  hand another node's or an admin's certificate this node's rights); no credentials is 401.
  Never the hub's identity for an unauthenticated TLS client.

The cache partition of a Bearer caller is its verified ServiceAccount (``partition``), never
the token itself.
"""

from __future__ import annotations

import dataclasses
import enum

from yurthub.certs import csrs


class Kind(enum.Enum):
    NODE = "node"
    """The node's own identity (the hub's credentials upstream, the component's partition)."""
    TOKEN = "token"
    """A Bearer token: forwarded as it came; cached only under its verified subject."""
    UNAUTHENTICATED = "unauthenticated"
    """401 on the secure port."""
    FORBIDDEN = "forbidden"
    """403 on the secure port: a certificate of someone else."""


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    kind: Kind
    message: str = ""


def decide(*, secure: bool, bearer: str, peer_common_name: str | None, node_name: str) -> Decision:
    """``peer_common_name``: CN of a client certificate the TLS layer verified against the
    cluster CA (None: no certificate)."""
    if bearer:
        return Decision(Kind.TOKEN)
    if not secure:
        return Decision(Kind.NODE)
    if peer_common_name is None:
        return Decision(
            Kind.UNAUTHENTICATED,
            "Unauthorized: present a ServiceAccount token (Authorization: Bearer) or this "
            "node's client certificate",
        )
    if peer_common_name == csrs.node_user(node_name):
        return Decision(Kind.NODE)
    return Decision(
        Kind.FORBIDDEN,
        f"the hub of node {node_name!r} acts only for {csrs.node_user(node_name)!r} or a "
        f"Bearer token; the certificate of {peer_common_name!r} is not accepted here",
    )
