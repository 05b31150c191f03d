"""Join-token discovery against the cluster (kubeadm's flow), carried out.

1. ``GET /api/v1/namespaces/kube-public/configmaps/cluster-info`` anonymously, TLS unverified
   (we do not know the CA yet), from the first server of ``--server-addr`` that answers;
2. ``jws.cluster_info``: the JWS proves the token's owner signed it, the pin proves the CA;
3. the same ConfigMap again, now over TLS verified with that CA: the server we talk to holds a
   certificate of the cluster we verified, and the content did not change in between.

Returns the server that answered and the verified CA; the caller writes ``pki/ca.crt`` and
``bootstrap-hub.conf``. Failures are ``jws.DiscoveryError`` (untrusted content, wrong token,
pin mismatch) or ``apiclient.Unreachable`` / ``apiclient.ApiError``.
"""

from __future__ import annotations

from collections.abc import Sequence

from yurthub.certs import apiclient, jws

CLUSTER_INFO_PATH = (
    f"/api/v1/namespaces/{jws.CLUSTER_INFO_NAMESPACE}/configmaps/{jws.CLUSTER_INFO_NAME}"
)


async def discover(
    servers: Sequence[str],
    token: jws.Token,
    pins: Sequence[str],
    *,
    skip_ca_verification: bool,
) -> tuple[str, jws.ClusterInfo]:
    async with apiclient.Client(servers, apiclient.insecure_context()) as anonymous:
        server, first = await anonymous.request("GET", CLUSTER_INFO_PATH)
    info = jws.cluster_info(first, token, pins, skip_ca_verification=skip_ca_verification)
    async with apiclient.Client([server], apiclient.trusting(info.ca_pem)) as verified:
        try:
            second = await verified.get(CLUSTER_INFO_PATH)
        except apiclient.Unreachable as e:
            raise jws.DiscoveryError(
                f"{server} does not present a certificate of the verified cluster CA: {e}"
            ) from e
    if (second.get("data") or {}).get("kubeconfig") != (first.get("data") or {}).get("kubeconfig"):
        raise jws.DiscoveryError("cluster-info changed between the two fetches; retrying")
    return server, info
