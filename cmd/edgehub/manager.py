"""``edgehub manager``: the cloud-side controllers (the CSR approver for hubs, the Akri broker
controller and node watcher, autonomy, the hub leaders of node pools) and the Configuration
validating webhook, and the
YurtStaticSet rollouts when ``--yurtstaticset-owner=edgehub``.

Runs as a Deployment with several replicas; one leads through a coordination.k8s.io Lease
(as kube-controller-manager) and only the leader acts, the others keep warm caches. Without
``--kubeconfig`` it authenticates with the Pod's ServiceAccount. Every flag also reads
``EDGEHUB_<FLAG>``. SIGTERM/SIGINT stop it cleanly (workers stopped, Lease released, exit 0);
a second signal exits at once. Bad flags, an unknown controller, an unusable kubeconfig, an
unreadable webhook certificate or a port in use exit 3 with one line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import os
import socket
from pathlib import Path
from typing import NoReturn

import click

from discovery import signalling
from edgehub import cli, helpgroups
from kubecontrol import credentials
from managers import csrapproving, hubleaderelecting, registry, running, settings


def _version() -> str:
    try:
        return importlib.metadata.version("edgehub")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(cli.EXIT_STARTUP_FAILURE)


def _comma_list(value: str) -> frozenset[str]:
    return frozenset(o.strip() for o in value.split(",") if o.strip())


@click.command(
    "manager", cls=helpgroups.Command, topics="manager", context_settings=cli.COMMAND_CONTEXT
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar=["EDGEHUB_KUBECONFIG", "KUBECONFIG"],
    help="Credentials and server of the apiserver; without it, the Pod's ServiceAccount.",
)
@click.option(
    "--service-account-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=credentials.SERVICE_ACCOUNT_DIR,
    help="In a Pod without --kubeconfig: the ServiceAccount token and ca.crt used as "
    "credentials (the server is $KUBERNETES_SERVICE_HOST).",
)
@click.option(
    "--controllers",
    default="*",
    help="Controllers to run: a comma list; '*' is all, 'name' enables one, '-name' leaves one "
    f"out. Known: {', '.join(registry.FACTORIES)}.",
)
@click.option(
    "--leader-elect",
    type=click.BOOL,
    default=True,
    is_flag=False,
    flag_value=True,
    help="Elect a leader among replicas through a Lease; only the leader acts "
    "(--leader-elect=false: act at once, for a single replica).",
)
@click.option(
    "--leader-elect-namespace", default="kube-system", help="Namespace of the leader Lease."
)
@click.option("--leader-elect-lease-name", default="edgehub-manager", help="Name of the Lease.")
@click.option(
    "--leader-elect-lease-duration",
    default=15,
    type=click.IntRange(min=1),
    help="Seconds a standby waits after the last renewal it saw before taking over.",
)
@click.option(
    "--leader-elect-renew-deadline",
    default=10.0,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds the leader keeps acting without a successful renewal (< lease duration).",
)
@click.option(
    "--leader-elect-retry-period",
    default=2.0,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds between tries to acquire or renew the Lease.",
)
@click.option(
    "--bind-address", default="0.0.0.0", help="Address of /healthz, /readyz and /metrics."
)
@click.option(
    "--health-port",
    default=settings.HEALTH_PORT,
    type=click.IntRange(0, 65535),
    help="Port of /healthz, /readyz and /metrics; 0 picks a free port.",
)
@click.option(
    "--hub-cert-organizations",
    default="",
    help="csrapprover: comma list of extra organizations hub client certificates may carry "
    "(the hubs' --hub-cert-organizations); openyurt:tenant:<ns> is always allowed, system:* "
    "never.",
)
@click.option(
    "--cluster-domain",
    default=csrapproving.DEFAULT_CLUSTER_DOMAIN,
    help="csrapprover: the cluster's DNS domain; hub serving certificates may name kubernetes, "
    "kubernetes.default, kubernetes.default.svc and kubernetes.default.svc.<domain>, no other "
    "DNS name (the hubs ask for kubernetes.default.svc.cluster.local, as YurtHub does).",
)
@click.option(
    "--hub-dummy-if-ips",
    default=csrapproving.DUMMY_IP,
    help="csrapprover: comma list of the hubs' --dummy-if-ip values, IPs hub serving "
    "certificates may name besides the default/kubernetes ClusterIPs, loopback and the "
    "requesting node's own status.addresses.",
)
@click.option(
    "--namespace",
    default="kube-system",
    help="hubleaderconfig: the hubs' namespace (their --namespace), where ConfigMaps "
    "leader-hub-<pool> are written.",
)
@click.option(
    "--concurrent-csr-workers",
    default=2,
    type=click.IntRange(min=1, max=64),
    help="csrapprover: CSRs decided at the same time.",
)
@click.option(
    "--concurrent-broker-workers",
    default=2,
    type=click.IntRange(min=1, max=64),
    help="brokers: Configurations whose brokers are reconciled at the same time.",
)
@click.option(
    "--webhook-tls-cert-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Serve the Configuration validating webhook over HTTPS with this certificate (PEM, "
    "chain first); re-read when it changes. Without it no webhook is served.",
)
@click.option(
    "--webhook-tls-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The webhook certificate's private key (PEM).",
)
@click.option(
    "--webhook-bind-address", default="0.0.0.0", help="Address of the webhook's HTTPS port."
)
@click.option(
    "--webhook-port",
    default=settings.WEBHOOK_PORT,
    type=click.IntRange(0, 65535),
    help="Port of the webhook (POST /validate); 0 picks a free port.",
)
@click.option(
    "--default-not-ready-toleration-seconds",
    default=300,
    type=click.IntRange(min=0),
    help="autonomy: the cluster's default tolerationSeconds for node.kubernetes.io/not-ready "
    "(the same flag of kube-apiserver): pods get it back when their node stops being autonomous.",
)
@click.option(
    "--default-unreachable-toleration-seconds",
    default=300,
    type=click.IntRange(min=0),
    help="autonomy: the cluster's default tolerationSeconds for node.kubernetes.io/unreachable "
    "(the same flag of kube-apiserver).",
)
@click.option(
    "--yurtstaticset-owner",
    type=click.Choice(registry.YSS_OWNERS),
    default="yurt-manager",
    help="yurtstaticset: who acts on YurtStaticSets. yurt-manager leaves them to OpenYurt's "
    "yurt-manager (the controller is not run); edgehub runs it, on YurtStaticSets not annotated "
    "for another owner, and never while yurt-manager's Lease kube-system/cloud-yurt-manager is "
    "held.",
)
@click.option(
    "--static-pod-upgrade-image",
    default=settings.WORKER_IMAGE,
    help="yurtstaticset: image of the upgrade worker Pods (runs `edgehub static-pod-upgrade`).",
)
@click.option(
    "--static-pod-path",
    default="/etc/kubernetes/manifests",
    help="yurtstaticset: kubelet's staticPodPath on the nodes, mounted into the workers.",
)
@click.option(
    "--static-pod-upgrade-timeout",
    default=120.0,
    type=click.FloatRange(min=1),
    help="yurtstaticset: seconds a worker waits for the new static Pod to be ready before it "
    "puts the old manifest back.",
)
@click.option(
    "--yurt-manager-lease",
    default="kube-system/cloud-yurt-manager",
    help="yurtstaticset: yurt-manager's leader Lease (NAMESPACE/NAME): while it is held the "
    "controller acts on nothing. '' skips the check: only when the yurt-manager that runs has "
    "its yurt-static-set-controller off (--controllers=*,-yurt-static-set-controller).",
)
@click.option(
    "--rollout-node-ready-timeout",
    default=120.0,
    type=click.FloatRange(min=1),
    help="yurtstaticset: seconds a node's kubelet has, after its worker ended, to renew its Lease "
    "through the new hub with the Node Ready; past it the rollout halts (docs/rollout.md).",
)
@click.option(
    "--hub-leader-replace-after",
    type=click.FloatRange(min=0),
    default=hubleaderelecting.REPLACE_AFTER,
    hidden=True,
)
def command(
    kubeconfig: Path | None,
    service_account_dir: Path,
    controllers: str,
    leader_elect: bool,
    leader_elect_namespace: str,
    leader_elect_lease_name: str,
    leader_elect_lease_duration: int,
    leader_elect_renew_deadline: float,
    leader_elect_retry_period: float,
    bind_address: str,
    health_port: int,
    hub_cert_organizations: str,
    cluster_domain: str,
    hub_dummy_if_ips: str,
    concurrent_csr_workers: int,
    concurrent_broker_workers: int,
    webhook_tls_cert_file: Path | None,
    webhook_tls_key_file: Path | None,
    webhook_bind_address: str,
    webhook_port: int,
    default_not_ready_toleration_seconds: int,
    default_unreachable_toleration_seconds: int,
    namespace: str,
    yurtstaticset_owner: str,
    static_pod_upgrade_image: str,
    static_pod_path: str,
    static_pod_upgrade_timeout: float,
    yurt_manager_lease: str,
    rollout_node_ready_timeout: float,
    hub_leader_replace_after: float,
) -> None:
    """Run the cloud-side controllers (CSR approver for hubs, Akri brokers, node watcher, pod
    tolerations of autonomous nodes, hub leaders) with Lease leader election, and the
    Configuration validating webhook."""
    try:
        chosen = registry.for_owner(registry.select(controllers), controllers, yurtstaticset_owner)
    except registry.UnknownController as e:
        _fail(str(e))
    lease: tuple[str, str] | None = None
    if yurt_manager_lease:
        namespace_, _, lease_name = yurt_manager_lease.partition("/")
        if not namespace_ or not lease_name or "/" in lease_name:
            _fail(f"--yurt-manager-lease {yurt_manager_lease[:64]!r}: not NAMESPACE/NAME (or '')")
        lease = (namespace_, lease_name)
    service_account = None
    if kubeconfig is None:
        service_account = credentials.in_cluster(service_account_dir, os.environ)
        if service_account is None:
            _fail(f"give --kubeconfig, or run in a Pod ({service_account_dir}/token is missing)")
    elif not kubeconfig.is_file():
        _fail(f"kubeconfig {kubeconfig} does not exist")
    if service_account is not None and service_account.server is None:
        _fail("in a Pod without KUBERNETES_SERVICE_HOST: give --kubeconfig")
    approver = settings.CsrApprover(
        extra_organizations=_comma_list(hub_cert_organizations),
        cluster_domain=cluster_domain,
        dummy_ips=_comma_list(hub_dummy_if_ips),
        timings=dataclasses.replace(settings.CSR_APPROVER_TIMINGS, workers=concurrent_csr_workers),
    )
    try:
        csrapproving.Policy(extra_organizations=approver.extra_organizations)
    except ValueError as e:
        _fail(f"--hub-cert-organizations: {e}")
    try:
        csrapproving.Policy(cluster_domain=cluster_domain)
    except ValueError as e:
        _fail(f"--cluster-domain: {e}")
    try:
        csrapproving.Policy(dummy_ips=approver.dummy_ips)
    except ValueError as e:
        _fail(f"--hub-dummy-if-ips: {e}")
    if (webhook_tls_cert_file is None) != (webhook_tls_key_file is None):
        _fail("--webhook-tls-cert-file and --webhook-tls-key-file go together")
    webhook = None
    if webhook_tls_cert_file is not None and webhook_tls_key_file is not None:
        webhook = settings.Webhook(
            cert_file=webhook_tls_cert_file,
            key_file=webhook_tls_key_file,
            bind_address=webhook_bind_address,
            port=webhook_port,
        )
    manager_settings = settings.ManagerSettings(
        controllers=chosen,
        kube=settings.KubeSettings(
            kubeconfig=kubeconfig,
            service_account=service_account,
            user_agent=f"edgehub-manager/{_version()}",
        ),
        leader_election=settings.LeaderElection(
            enabled=leader_elect,
            namespace=leader_elect_namespace,
            name=leader_elect_lease_name,
            lease_duration=leader_elect_lease_duration,
            renew_deadline=leader_elect_renew_deadline,
            retry_period=leader_elect_retry_period,
        ),
        bind_address=bind_address,
        health_port=health_port,
        host=socket.gethostname(),
        csr_approver=approver,
        brokers=settings.Brokers(
            timings=dataclasses.replace(settings.BROKERS_TIMINGS, workers=concurrent_broker_workers)
        ),
        webhook=webhook,
        autonomy=settings.Autonomy(
            not_ready_toleration_seconds=default_not_ready_toleration_seconds,
            unreachable_toleration_seconds=default_unreachable_toleration_seconds,
        ),
        hub_leader=settings.HubLeader(namespace=namespace, replace_after=hub_leader_replace_after),
        static_sets=settings.StaticSets(
            owner=yurtstaticset_owner,
            worker_image=static_pod_upgrade_image,
            static_pod_path=static_pod_path,
            worker_timeout=static_pod_upgrade_timeout,
            node_ready_timeout=rollout_node_ready_timeout,
            yurt_manager_lease=lease,
        ),
    )
    try:
        asyncio.run(signalling.run_until_signalled(running.run(manager_settings)))
    except running.StartupError as e:
        _fail(str(e))
