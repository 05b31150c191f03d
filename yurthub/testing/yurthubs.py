"""OpenYurt's YurtHub in the test bed (``make yurthub-bin``): its ``--root-dir`` laid out as its
own token bootstrap leaves it, and its command line against a real control plane.

The identity is a client certificate of ``system:node:<node>`` (groups as given, YurtHub's
``openyurt:yurthub`` among them) and a serving pair for loopback, written where YurtHub looks
(``pki/yurthub-current.pem``, ``pki/yurthub-server-current.pem``, ``yurthub.conf``), so it makes
no client CSR. Its serving certificate it renews at once for the IPs and names it wants: a CSR
that ``edgehub manager``'s csrapprover (or yurt-manager's) approves; without one it keeps the
laid-out pair. The bootstrap file its flags require is the same kubeconfig (never used: the
pairs exist). Used by ``bench/side_by_side.py``, the side-by-side metrics test and the fleet
(``fleets``).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Sequence

from yurthub.testing import realcluster
from yurthub.testing.sim import kubeconfigs


def _store(pki: pathlib.Path, prefix: str, pem: bytes) -> None:
    """``<prefix>-<stamp>.pem`` and the ``<prefix>-current.pem`` symlink to it, as client-go's
    certificate file store (YurtHub's) keeps them: YurtHub's certificate managers rotate a
    certificate that does not match their template (its serving one here: other IPs and
    names) and refuse to store the new pair unless ``-current.pem`` is such a link."""
    stamped = pki / f"{prefix}-2000-01-01-00-00-00.pem"
    stamped.write_bytes(pem)
    current = pki / f"{prefix}-current.pem"
    current.unlink(missing_ok=True)
    current.symlink_to(stamped.name)


def lay_out_root(
    cluster: realcluster.RealCluster,
    root: pathlib.Path,
    server: str,
    node: str,
    groups: Iterable[str],
) -> pathlib.Path:
    user = f"system:node:{node}"
    pki = root / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    cert, key = cluster.issue_identity(user, groups)
    _store(pki, "yurthub", cert + key)
    serving_cert, serving_key = cluster.authority().issue_serving(["127.0.0.1", "localhost", node])
    _store(pki, "yurthub-server", serving_cert + serving_key)
    (pki / "ca.crt").write_bytes(cluster.ca_pem)
    text = kubeconfigs.render(
        server=server, ca_pem=cluster.ca_pem, user=user, cert_pem=cert, key_pem=key
    )
    (root / "yurthub.conf").write_text(text)
    (root / "bootstrap-hub.conf").write_text(text)
    return root


def argv(
    binary: str,
    root: pathlib.Path,
    server: str,
    node: str,
    pool: str,
    ports: tuple[int, int, int, int],
    *,
    node_ip: str = "127.0.0.1",
    extra: Sequence[str] = (),
) -> list[str]:
    """YurtHub's command line; ``ports``: serve, proxy, proxy-secure, multiplexer (bound on
    ``node_ip``, where the pool's other hubs dial a leader: the node's InternalIP)."""
    serve, proxy, secure, multiplexer = ports
    return [
        binary,
        f"--server-addr={server}",
        f"--node-name={node}",
        f"--nodepool-name={pool}",
        f"--bootstrap-file={root / 'bootstrap-hub.conf'}",
        f"--root-dir={root}",
        f"--disk-cache-path={root / 'cache'}",
        "--bind-address=127.0.0.1",
        f"--serve-port={serve}",
        "--bind-proxy-address=127.0.0.1",
        f"--proxy-port={proxy}",
        f"--proxy-secure-port={secure}",
        f"--multiplexer-port={multiplexer}",
        f"--node-ip={node_ip}",
        "--enable-dummy-if=false",
        "--v=1",
        *extra,
    ]
