"""Pure: the files and command lines of a real test cluster's control plane.

A ``Layout`` names every file under the cluster's directory; ``Ports`` holds the loopback
ports picked for one run. The ``*_argv`` functions turn them into the command line of each
component, so what the test bed runs can be read (and table-tested) in one place:

- etcd: one member, client and peer URLs on loopback, no fsync (a test bed on a shared
  2-core machine: durability is not what it tests, and fsync stalls make the apiserver slow);
- kube-apiserver: TLS, client certificates + ServiceAccount tokens + bootstrap tokens,
  ``Node,RBAC`` authorization, NodeRestriction among the admission plugins, protobuf storage
  and aggregated discovery (both defaults of the pinned release);
- kube-controller-manager: its own identity, one ServiceAccount per controller, the cluster
  CA as the CSR signer, every default controller plus the bootstrap-token ones;
- kube-scheduler: its own identity.

No leader election: one of each, and a lease round trip would only slow ``up`` down.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
    "Priority",
)


@dataclasses.dataclass(frozen=True, slots=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """Every path of one cluster, all under ``root``."""

    root: pathlib.Path

    @property
    def pki(self) -> pathlib.Path:
        return self.root / "pki"

    @property
    def logs(self) -> pathlib.Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> pathlib.Path:
        return self.root / "etcd"

    @property
    def state(self) -> pathlib.Path:
        """What ``up`` started (pids, ports): ``down`` reads it."""
        return self.root / "cluster.json"

    @property
    def admin_kubeconfig(self) -> pathlib.Path:
        return self.root / "admin.kubeconfig"

    @property
    def controller_manager_kubeconfig(self) -> pathlib.Path:
        return self.root / "controller-manager.kubeconfig"

    @property
    def scheduler_kubeconfig(self) -> pathlib.Path:
        return self.root / "scheduler.kubeconfig"

    @property
    def nodes(self) -> pathlib.Path:
        """Node identities minted for tests (``<name>.kubeconfig``)."""
        return self.root / "nodes"

    def pki_file(self, name: str) -> pathlib.Path:
        return self.pki / name

    def log(self, component: str) -> pathlib.Path:
        return self.logs / f"{component}.log"


def _flags(values: Mapping[str, object]) -> list[str]:
    return [f"--{k}={v}" for k, v in values.items()]


def etcd_argv(binary: pathlib.Path, layout: Layout, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary),
        *_flags(
            {
                "name": "edgehub-test",
                "data-dir": layout.etcd_data,
                "listen-client-urls": client,
                "advertise-client-urls": client,
                "listen-peer-urls": peer,
                "initial-advertise-peer-urls": peer,
                "initial-cluster": f"edgehub-test={peer}",
                "unsafe-no-fsync": "true",
                "log-level": "warn",
                "quota-backend-bytes": 2 << 30,
            }
        ),
    ]


def apiserver_argv(
    binary: pathlib.Path, layout: Layout, ports: Ports, extra: Mapping[str, str] | None = None
) -> list[str]:
    pki = layout.pki_file
    flags: dict[str, object] = {
        "etcd-servers": f"http://127.0.0.1:{ports.etcd_client}",
        "bind-address": "127.0.0.1",
        "advertise-address": "127.0.0.1",
        "secure-port": ports.apiserver,
        "tls-cert-file": pki("apiserver.crt"),
        "tls-private-key-file": pki("apiserver.key"),
        "client-ca-file": pki("ca.crt"),
        "kubelet-client-certificate": pki("apiserver-kubelet-client.crt"),
        "kubelet-client-key": pki("apiserver-kubelet-client.key"),
        "service-account-key-file": pki("sa.pub"),
        "service-account-signing-key-file": pki("sa.key"),
        "service-account-issuer": SERVICE_ACCOUNT_ISSUER,
        "service-cluster-ip-range": SERVICE_CIDR,
        "authorization-mode": "Node,RBAC",
        "enable-admission-plugins": ",".join(ADMISSION_PLUGINS),
        "enable-bootstrap-token-auth": "true",
        "allow-privileged": "true",
        # The `kubernetes` Endpoints would carry 127.0.0.1, which endpoint validation
        # refuses (loopback); nothing in the test bed routes through that Service.
        "endpoint-reconciler-type": "none",
        "cert-dir": layout.root / "apiserver",
        "profiling": "false",
        "v": 1,
    }
    flags.update(extra or {})
    return [str(binary), *_flags(flags)]


def _delegated_auth(kubeconfig: pathlib.Path) -> dict[str, object]:
    return {
        "kubeconfig": kubeconfig,
        "authentication-kubeconfig": kubeconfig,
        "authorization-kubeconfig": kubeconfig,
        "bind-address": "127.0.0.1",
        "leader-elect": "false",
        "profiling": "false",
    }


def controller_manager_argv(
    binary: pathlib.Path, layout: Layout, ports: Ports, extra: Mapping[str, str] | None = None
) -> list[str]:
    pki = layout.pki_file
    flags: dict[str, object] = {
        **_delegated_auth(layout.controller_manager_kubeconfig),
        "secure-port": ports.controller_manager,
        "cluster-signing-cert-file": pki("ca.crt"),
        "cluster-signing-key-file": pki("ca.key"),
        "root-ca-file": pki("ca.crt"),
        "service-account-private-key-file": pki("sa.key"),
        "use-service-account-credentials": "true",
        "controllers": "*,bootstrapsigner,tokencleaner",
        "service-cluster-ip-range": SERVICE_CIDR,
        "v": 1,
    }
    flags.update(extra or {})
    return [str(binary), *_flags(flags)]


def scheduler_argv(
    binary: pathlib.Path, layout: Layout, ports: Ports, extra: Mapping[str, str] | None = None
) -> list[str]:
    flags: dict[str, object] = {
        **_delegated_auth(layout.scheduler_kubeconfig),
        "secure-port": ports.scheduler,
        "v": 1,
    }
    flags.update(extra or {})
    return [str(binary), *_flags(flags)]
