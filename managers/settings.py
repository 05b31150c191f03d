"""The manager's settings tree: frozen dataclasses built once (by the CLI or a test).

Defaults are kube-controller-manager's where it has one (leader election 15/10/2 s).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kubecontrol import controlling, credentials
from managers import csrapproving, hubleaderelecting

HEALTH_PORT = 10272
# CSRs are decided on their events; the resync retries what a lost write left pending.
CSR_APPROVER_TIMINGS = controlling.Timings(workers=2, resync=600.0)
# Brokers follow their events; the resync catches what a lost event or write left behind.
BROKERS_TIMINGS = controlling.Timings(workers=2, resync=300.0)
NODE_WATCHER_TIMINGS = controlling.Timings(workers=2, resync=300.0)
WEBHOOK_PORT = 8443
# Pods are decided on their events and their node's; the resync retries a lost write. Eight
# writes in flight: a node's change touches all its pods at once (up to 110 with kubelet's
# default), and the workers only wait on the apiserver.
AUTONOMY_TIMINGS = controlling.Timings(workers=8, resync=600.0)
# Pools are decided on their events and their nodes'; the resync retries a lost write. Four in
# flight: a hundred pools created at once are elected in about a quarter of the round trips.
HUB_LEADER_TIMINGS = controlling.Timings(workers=4, resync=300.0)
# YurtStaticSets follow their Pods' and Nodes' events; the resync retries a lost write.
STATIC_SETS_TIMINGS = controlling.Timings(workers=2, resync=300.0)
WORKER_IMAGE = "ghcr.io/edgehub/edgehub:0.1.0"


@dataclasses.dataclass(frozen=True, slots=True)
class KubeSettings:
    kubeconfig: Path | None = None
    """Credentials and server; without it, ``service_account``."""
    service_account: credentials.ServiceAccount | None = None
    """In a Pod: the ServiceAccount token and CA, server from ``KUBERNETES_SERVICE_HOST``."""
    user_agent: str = "edgehub-manager/0.0.0"
    request_timeout: float = 30.0
    """Seconds for one non-watch request."""
    watch_timeout: int = 300
    """Server-side timeout of one watch request; the watch is then resumed."""


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderElection:
    enabled: bool = True
    namespace: str = "kube-system"
    name: str = "edgehub-manager"
    identity: str = ""
    """``hostname_uuid``, unique per process (the CLI sets it)."""
    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class CsrApprover:
    extra_organizations: frozenset[str] = frozenset()
    """Organizations hub client CSRs may carry besides openyurt:yurthub and system:nodes (the
    hubs' ``--hub-cert-organizations``); ``openyurt:tenant:*`` is always allowed."""
    cluster_domain: str = csrapproving.DEFAULT_CLUSTER_DOMAIN
    """``--cluster-domain``: serving CSRs may name ``kubernetes.default.svc.<domain>``."""
    dummy_ips: frozenset[str] = frozenset({csrapproving.DUMMY_IP})
    """``--hub-dummy-if-ips``: the hubs' ``--dummy-if-ip`` values, names serving CSRs may carry."""
    timings: controlling.Timings = CSR_APPROVER_TIMINGS
    wait_initial: float = 2.0
    wait_cap: float = 60.0
    """A CSR waiting for a fact (its node not registered yet) is decided again after
    ``wait_initial`` seconds, doubling up to ``wait_cap``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Brokers:
    timings: controlling.Timings = BROKERS_TIMINGS
    restart_backoff_initial: float = 1.0
    """Seconds before a broker pod that ended is created again; doubled each time it ends
    again without having run, up to ``restart_backoff_cap``."""
    restart_backoff_cap: float = 300.0


@dataclasses.dataclass(frozen=True, slots=True)
class NodeWatcher:
    timings: controlling.Timings = NODE_WATCHER_TIMINGS
    reclean_initial: float = 5.0
    reclean_cap: float = 300.0
    """A deleted node whose agent writes its Instances back is cleaned again after
    ``reclean_initial`` seconds, doubling each time, at most ``reclean_cap``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Webhook:
    """The Configuration validating webhook (HTTPS), served by every replica."""

    cert_file: Path
    key_file: Path
    """PEM serving certificate (chain) and key; re-read when they change on disk."""
    bind_address: str = "0.0.0.0"
    port: int = WEBHOOK_PORT
    """0 picks a free port."""
    reload_interval: float = 10.0
    """Seconds between checks of the certificate files for a rotation."""
    max_concurrent: int = 16
    """Reviews in progress at once; more are refused (the apiserver applies the webhook's
    failurePolicy)."""
    dry_run_timeout: float = 5.0
    """Seconds for the dry-run create that checks a broker or service spec."""


@dataclasses.dataclass(frozen=True, slots=True)
class Autonomy:
    not_ready_toleration_seconds: int = 300
    unreachable_toleration_seconds: int = 300
    """The cluster's defaults: kube-apiserver's ``--default-not-ready-toleration-seconds`` and
    ``--default-unreachable-toleration-seconds`` (what DefaultTolerationSeconds gives pods and
    what pods get back when their node stops being autonomous). Must equal the apiserver's."""
    timings: controlling.Timings = AUTONOMY_TIMINGS


@dataclasses.dataclass(frozen=True, slots=True)
class HubLeader:
    """The hub-leader controllers (``hubleader``, ``hubleaderconfig``, ``hubleaderrbac``)."""

    namespace: str = "kube-system"
    """``--namespace``: where the hubs read ``leader-hub-<pool>`` (their ``--namespace``)."""
    timings: controlling.Timings = HUB_LEADER_TIMINGS
    replace_after: float = hubleaderelecting.REPLACE_AFTER
    """Hidden ``--hub-leader-replace-after``: seconds a leader must be NotReady, while a Ready
    candidate waits, before it is replaced (shortened by tests only)."""


@dataclasses.dataclass(frozen=True, slots=True)
class StaticSets:
    """The ``yurtstaticset`` controller (docs/rollout.md)."""

    owner: str = "yurt-manager"
    """``--yurtstaticset-owner``: ``edgehub`` runs the controller; ``yurt-manager`` (the
    default) leaves YurtStaticSets to yurt-manager and the controller is not run."""
    worker_image: str = WORKER_IMAGE
    """``--static-pod-upgrade-image``: the image of the worker Pods (it runs ``edgehub``)."""
    static_pod_path: str = "/etc/kubernetes/manifests"
    """kubelet's staticPodPath on the nodes (mounted into the workers)."""
    worker_timeout: float = 120.0
    """Seconds a worker waits for the new static Pod to be ready before restoring the old."""
    node_ready_timeout: float = 120.0
    """Seconds a node's kubelet has, after its worker ended, to be seen back (Lease renewed,
    Node Ready, mirror Pod on the new hash) before the rollout halts."""
    yurt_manager_lease: tuple[str, str] | None = ("kube-system", "cloud-yurt-manager")
    """yurt-manager's leader Lease: while it is held, the controller acts on nothing (None:
    not looked at; ``--yurt-manager-lease=''``)."""
    timings: controlling.Timings = STATIC_SETS_TIMINGS


@dataclasses.dataclass(frozen=True, slots=True)
class ManagerSettings:
    controllers: tuple[str, ...]
    kube: KubeSettings = KubeSettings()
    leader_election: LeaderElection = LeaderElection()
    bind_address: str = "0.0.0.0"
    health_port: int | None = HEALTH_PORT
    """``/healthz``, ``/readyz``, ``/metrics``; 0 picks a free port, None serves nothing."""
    host: str = ""
    """This replica's name in Events (the Pod's hostname)."""
    csr_approver: CsrApprover = CsrApprover()
    brokers: Brokers = Brokers()
    node_watcher: NodeWatcher = NodeWatcher()
    webhook: Webhook | None = None
    """None: no webhook is served."""
    autonomy: Autonomy = Autonomy()
    hub_leader: HubLeader = HubLeader()
    static_sets: StaticSets = StaticSets()
