"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, controller-manager, scheduler.

The binaries are the Go-built ones of ``k8sbinaries`` (``make cluster-bins``); the command
lines are ``clusterflags``'. ``RealCluster(directory).up()`` writes a fresh PKI (cluster CA,
apiserver serving cert, one client identity per component, the ServiceAccount signing key),
starts the four components on free loopback ports and returns once the cluster serves:
apiserver ``/readyz`` ok, controller-manager and scheduler ``/healthz`` ok, and the
``default`` ServiceAccount exists (the controllers really run against the apiserver). It
leaves ``DIR/admin.kubeconfig`` and ``DIR/cluster.json`` (what ``down`` stops). ``DIR`` must be
missing, empty or one ``up`` made (``MARKER``): ``up`` replaces etcd's data, the logs and the
PKI there, so another directory raises ``workdirs.NotOursError`` untouched.

``node_kubeconfig(name)`` mints what kubelet holds on a real node: a client certificate
for ``system:node:<name>`` in group ``system:nodes``, signed by the cluster CA.

Failure: a component that exits or does not become ready within the deadline raises
``processes.ProcessError`` with its last log lines, after everything started is stopped.
Invariant: ``down`` stops every process ``up`` started, also from another process
(``edgehub cluster down --dir DIR``), and never a process that merely reuses a pid.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from yurthub.testing import clusterflags, k8sbinaries, ports, processes, workdirs
from yurthub.testing.sim import kubeconfigs, pki

ADMIN_USER = "kubernetes-admin"
ADMIN_GROUPS = ("system:masters",)
CLUSTER_NAME = "edgehub-test"
_SERVING_NAMES = (*pki.DEFAULT_SERVING_NAMES,)
MARKER = ".edgehub-cluster"
"""In the directory ``up`` made (``workdirs``): only then does ``up`` clear old data there."""
MARKER_NOTE = "made by `edgehub cluster up`, which replaces its data, logs and PKI at every start"


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback TCP ports, from below the ephemeral range (``ports``):
    another program may still bind one before we do, which ``up`` reports."""
    return ports.free_ports(count)


def _write(path: pathlib.Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def close_answer(error: BaseException) -> None:
    """Close the answer an ``HTTPError`` holds (and with it the connection), when ``error`` is
    one: a caller that catches ``OSError`` around ``urlopen`` catches HTTP errors too, and an
    answer left to the garbage collector warns, unraisably, in whatever test runs then."""
    if isinstance(error, urllib.error.HTTPError):
        error.close()


def _failing_checks(body: bytes) -> str:
    """The checks a ``/readyz`` or ``/healthz`` answer says failed (its ``[-]`` lines), joined;
    empty when it names none. PURE."""
    failing = [
        line.decode(errors="replace") for line in body.splitlines() if line.startswith(b"[-]")
    ]
    return "; ".join(failing)


def _get(url: str, context: ssl.SSLContext | None, timeout: float = 2.0) -> tuple[int, bytes]:
    """(status, body) of a GET; (0, reason) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as r:
            return int(r.status), r.read(1 << 20)
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return int(e.code), e.read(1 << 20)
    except (OSError, ssl.SSLError) as e:
        return 0, str(e).encode()


class RealCluster:
    """One control plane under ``directory``. A context manager: ``with RealCluster(d) as c``."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        binaries: k8sbinaries.Binaries | None = None,
        *,
        die_with_parent: bool = False,
        extra_args: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.layout = clusterflags.Layout(pathlib.Path(directory).resolve())
        self.binaries = binaries or k8sbinaries.locate()
        self._die_with_parent = die_with_parent
        self._extra = {k: dict(v) for k, v in (extra_args or {}).items()}
        self._procs: list[processes.Process] = []
        self.ports: clusterflags.Ports | None = None

    @classmethod
    def attach(
        cls, directory: str | os.PathLike[str], binaries: k8sbinaries.Binaries | None = None
    ) -> RealCluster:
        """The cluster another process started in ``directory`` (reads ``cluster.json``):
        for minting identities and running kubectl; ``down`` on it stops nothing."""
        cluster = cls(directory, binaries)
        try:
            doc = json.loads(cluster.layout.state.read_text())
            cluster.ports = clusterflags.Ports(**doc["ports"])
        except FileNotFoundError as e:
            raise processes.ProcessError(f"no cluster runs in {directory}") from e
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise processes.ProcessError(f"{cluster.layout.state} is unreadable: {e}") from e
        return cluster

    def __enter__(self) -> Self:
        return self.up()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    # --- what tests use -----------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.ports is None:
            raise RuntimeError("the cluster is not up")
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def ca_path(self) -> pathlib.Path:
        return self.layout.pki_file("ca.crt")

    @property
    def ca_pem(self) -> bytes:
        return self.ca_path.read_bytes()

    @property
    def admin_kubeconfig(self) -> pathlib.Path:
        return self.layout.admin_kubeconfig

    def authority(self) -> pki.Authority:
        return pki.Authority.load(
            self.ca_path.read_bytes(), self.layout.pki_file("ca.key").read_bytes()
        )

    def issue_identity(self, user: str, groups: Iterable[str] = ()) -> tuple[bytes, bytes]:
        """A client certificate (PEM cert, PEM key) for ``user`` in ``groups``."""
        return self.authority().issue_client(user, groups)

    def write_kubeconfig(
        self,
        path: str | os.PathLike[str],
        user: str,
        groups: Iterable[str] = (),
        *,
        server: str | None = None,
    ) -> pathlib.Path:
        cert, key = self.issue_identity(user, groups)
        text = kubeconfigs.render(
            server=server or self.url,
            ca_pem=self.ca_pem,
            user=user,
            cert_pem=cert,
            key_pem=key,
            cluster=CLUSTER_NAME,
        )
        return kubeconfigs.write(pathlib.Path(path), text)

    def node_kubeconfig(
        self, node: str, *, extra_groups: Sequence[str] = (), server: str | None = None
    ) -> pathlib.Path:
        """The identity kubelet has on node ``node`` (and the hub borrows): a client cert for
        ``system:node:<node>`` in ``system:nodes`` (plus ``extra_groups``)."""
        return self.write_kubeconfig(
            self.layout.nodes / f"{node}.kubeconfig",
            f"system:node:{node}",
            ("system:nodes", *extra_groups),
            server=server,
        )

    def kubectl(
        self,
        *args: str,
        kubeconfig: pathlib.Path | None = None,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """The pinned kubectl against this cluster (admin unless ``kubeconfig``)."""
        argv = [
            str(self.binaries.path("kubectl")),
            "--kubeconfig",
            str(kubeconfig or self.admin_kubeconfig),
            "--cache-dir",
            str(self.layout.root / "kubectl-cache"),
            *args,
        ]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise processes.ProcessError(
                f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def admin_ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_path))
        ctx.load_cert_chain(
            str(self.layout.pki_file("admin.crt")), str(self.layout.pki_file("admin.key"))
        )
        return ctx

    def log(self, component: str) -> pathlib.Path:
        return self.layout.log(component)

    def process(self, component: str) -> processes.Process:
        """The running component this object started (``kube-apiserver``, ``etcd``...)."""
        for proc in self._procs:
            if proc.name == component:
                return proc
        raise processes.ProcessError(f"{component} was not started by this cluster object")

    def restart_apiserver(self, timeout: float = 90.0) -> float:
        """Stop kube-apiserver (SIGTERM, as a rolling restart does) and start it again on the
        same port with the same flags; returns once ``/readyz`` answers 200, with the seconds
        it was away. Clients see their connections end, then refused, then served again."""
        proc = self.process("kube-apiserver")
        stopped = time.monotonic()
        proc.stop()
        proc.start()
        self._save_state()
        self._wait(proc, time.monotonic() + timeout, f"{self.url}/readyz", self.admin_ssl_context())
        return time.monotonic() - stopped

    def etcd_revision(self) -> int:
        """etcd's current revision (its v3 JSON gateway, ``/v3/kv/range``)."""
        doc = self._etcd("/v3/kv/range", {"key": "AA==", "limit": 1})
        return int(doc["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (physically), as
        kube-apiserver's own periodic compaction does: any read or watch of an older revision
        from etcd is then refused (410 Gone from the apiserver). Returns that revision."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def _etcd(self, path: str, body: Mapping[str, object]) -> dict[str, Any]:
        if self.ports is None:
            raise RuntimeError("the cluster is not up")
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.ports.etcd_client}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            doc: dict[str, Any] = json.loads(r.read(1 << 20))
        return doc

    # --- up / down ----------------------------------------------------------------------

    def up(self, timeout: float = 90.0) -> Self:
        """Start the control plane and return once it serves; on failure stop all, raise."""
        root = self.layout.root
        # A directory of the user's is refused untouched; in one we made, the last run's data
        # and logs go below (not its nodes' identities).
        workdirs.claim(root, MARKER, MARKER_NOTE, clear=False)
        if self.layout.state.exists():
            raise processes.ProcessError(
                f"{root} already holds a cluster ({self.layout.state}); "
                f"`edgehub cluster down --dir {root}` first"
            )
        for stale in (self.layout.etcd_data, self.layout.logs):
            shutil.rmtree(stale, ignore_errors=True)
        self.ports = clusterflags.Ports(*free_ports(5))
        self._write_pki()
        deadline = time.monotonic() + timeout
        try:
            self._start_all(deadline)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stop every process this object started (newest first); idempotent."""
        for proc in reversed(self._procs):
            proc.stop()
        self._procs.clear()
        self.layout.state.unlink(missing_ok=True)

    def _start_all(self, deadline: float) -> None:
        assert self.ports is not None
        b, layout, ports = self.binaries, self.layout, self.ports
        etcd = self._spawn("etcd", clusterflags.etcd_argv(b.path("etcd"), layout, ports))
        self._wait(etcd, deadline, f"http://127.0.0.1:{ports.etcd_client}/health", None)
        apiserver = self._spawn(
            "kube-apiserver",
            clusterflags.apiserver_argv(
                b.path("kube-apiserver"), layout, ports, self._extra.get("kube-apiserver")
            ),
        )
        self._wait(apiserver, deadline, f"{self.url}/readyz", self.admin_ssl_context())
        kcm = self._spawn(
            "kube-controller-manager",
            clusterflags.controller_manager_argv(
                b.path("kube-controller-manager"),
                layout,
                ports,
                self._extra.get("kube-controller-manager"),
            ),
        )
        scheduler = self._spawn(
            "kube-scheduler",
            clusterflags.scheduler_argv(
                b.path("kube-scheduler"), layout, ports, self._extra.get("kube-scheduler")
            ),
        )
        # Their serving certs are self-signed in memory: only liveness is asked of them.
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        self._wait(kcm, deadline, f"https://127.0.0.1:{ports.controller_manager}/healthz", insecure)
        self._wait(scheduler, deadline, f"https://127.0.0.1:{ports.scheduler}/healthz", insecure)
        # The controllers really work against the apiserver once they made this account.
        self._wait(
            kcm,
            deadline,
            f"{self.url}/api/v1/namespaces/default/serviceaccounts/default",
            self.admin_ssl_context(),
        )

    def _spawn(self, name: str, argv: list[str]) -> processes.Process:
        proc = processes.Process(
            name, argv, self.layout.log(name), die_with_parent=self._die_with_parent
        )
        proc.start()
        self._procs.append(proc)
        self._save_state()
        return proc

    def _save_state(self) -> None:
        assert self.ports is not None
        doc = {
            "apiserver": self.url,
            "admin_kubeconfig": str(self.admin_kubeconfig),
            "binaries": str(self.binaries.directory),
            "ports": {
                "etcd_client": self.ports.etcd_client,
                "etcd_peer": self.ports.etcd_peer,
                "apiserver": self.ports.apiserver,
                "controller_manager": self.ports.controller_manager,
                "scheduler": self.ports.scheduler,
            },
            "processes": [p.record().to_json() for p in self._procs],
        }
        _write(self.layout.state, json.dumps(doc, indent=2).encode(), 0o600)

    def _wait(
        self,
        proc: processes.Process,
        deadline: float,
        url: str,
        context: ssl.SSLContext | None,
    ) -> None:
        last = b""
        while time.monotonic() < deadline:
            if not proc.alive:
                raise proc.failure("exited while starting")
            status, body = _get(url, context)
            if status == 200:
                return
            last = f"{status} {_failing_checks(body) or body[:200]!r}".encode()
            time.sleep(0.1)
        raise proc.failure(f"not ready in time ({url} last said {last.decode()})")

    def _write_pki(self) -> None:
        layout = self.layout
        ca = pki.Authority.create("edgehub-test-cluster-ca")
        _write(layout.pki_file("ca.crt"), ca.cert_pem)
        _write(layout.pki_file("ca.key"), ca.key_pem, 0o600)
        cert, key = ca.issue_serving(_SERVING_NAMES)
        _write(layout.pki_file("apiserver.crt"), cert)
        _write(layout.pki_file("apiserver.key"), key, 0o600)
        cert, key = ca.issue_client("kube-apiserver-kubelet-client", ("system:masters",))
        _write(layout.pki_file("apiserver-kubelet-client.crt"), cert)
        _write(layout.pki_file("apiserver-kubelet-client.key"), key, 0o600)
        admin_cert, admin_key = ca.issue_client(ADMIN_USER, ADMIN_GROUPS)
        _write(layout.pki_file("admin.crt"), admin_cert)
        _write(layout.pki_file("admin.key"), admin_key, 0o600)
        private, public = pki.signing_key_pair()
        _write(layout.pki_file("sa.key"), private, 0o600)
        _write(layout.pki_file("sa.pub"), public)
        for path, user in (
            (layout.controller_manager_kubeconfig, "system:kube-controller-manager"),
            (layout.scheduler_kubeconfig, "system:kube-scheduler"),
        ):
            c, k = ca.issue_client(user)
            kubeconfigs.write(path, self._render(user, c, k))
        kubeconfigs.write(layout.admin_kubeconfig, self._render(ADMIN_USER, admin_cert, admin_key))

    def _render(self, user: str, cert: bytes, key: bytes) -> str:
        return kubeconfigs.render(
            server=self.url,
            ca_pem=self.ca_pem,
            user=user,
            cert_pem=cert,
            key_pem=key,
            cluster=CLUSTER_NAME,
        )


def down(directory: str | os.PathLike[str]) -> list[str]:
    """Stop what ``edgehub cluster up --dir directory`` started; the names it stopped.

    Works from any process (it reads ``cluster.json``); a missing state file means nothing
    is running there and is not an error.
    """
    layout = clusterflags.Layout(pathlib.Path(directory).resolve())
    try:
        doc = json.loads(layout.state.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise processes.ProcessError(f"{layout.state} is unreadable: {e}") from e
    records = [processes.Record.from_json(r) for r in doc.get("processes", [])]
    stopped = processes.stop_recorded(records)
    layout.state.unlink(missing_ok=True)
    return stopped
