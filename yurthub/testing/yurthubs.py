"""OpenYurt's YurtHub in the test bed (``make yurthub-bin``): its ``--root-dir`` laid out as its
own token bootstrap leaves it, and its command line against a real control plane.

The identity is a client certificate of ``system:node:<node>`` (groups as given, YurtHub's
``openyurt:yurthub`` among them) and a serving pair for loopback, written where YurtHub looks
(``pki/yurthub-current.pem``, ``pki/yurthub-server-current.pem``, ``yurthub.conf``), so it makes
no CSR; the bootstrap file its flags require is the same kubeconfig (never used: the pairs
exist). Used by ``bench/side_by_side.py`` and the side-by-side metrics test.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable

from yurthub.testing import realcluster
from yurthub.testing.sim import kubeconfigs


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
    (pki / "yurthub-current.pem").write_bytes(cert + key)
    serving_cert, serving_key = cluster.authority().issue_serving(["127.0.0.1", "localhost", node])
    (pki / "yurthub-server-current.pem").write_bytes(serving_cert + serving_key)
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
) -> list[str]:
    """YurtHub's command line; ``ports``: serve, proxy, proxy-secure, multiplexer."""
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
        "--node-ip=127.0.0.1",
        "--enable-dummy-if=false",
        "--v=1",
    ]
