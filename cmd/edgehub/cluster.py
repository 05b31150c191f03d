"""``edgehub cluster up|down|node``: a real Kubernetes control plane on loopback, for tests.

    edgehub cluster up --dir /tmp/k8s        # etcd, kube-apiserver, controller-manager,
                                             # scheduler; returns once ready
    kubectl --kubeconfig /tmp/k8s/admin.kubeconfig get ns
    edgehub cluster node --dir /tmp/k8s --name edge-1 --server http://127.0.0.1:10261
    edgehub cluster down --dir /tmp/k8s      # stops every process `up` started

The binaries are the pinned, Go-built ones (``make cluster-bins``; ``--bin-dir`` or
``$EDGEHUB_K8S_BIN`` to choose). ``up`` prints ``apiserver=<url> kubeconfig=<path>`` on
stdout; a component that fails to start is named with its last log lines (exit 1);
missing binaries, a directory that already holds a cluster, or one ``up`` did not make
(not missing, not empty, no ``.edgehub-cluster`` in it: left untouched) exit 3.
"""

from __future__ import annotations

import pathlib
import signal
import threading

import click

from edgehub import cli, helpgroups
from yurthub.testing import hollownodes, k8sbinaries, processes, realcluster, workdirs


def _binaries(bin_dir: str | None) -> k8sbinaries.Binaries:
    try:
        return k8sbinaries.locate(bin_dir)
    except k8sbinaries.MissingBinariesError as e:
        click.echo(f"edgehub cluster: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e


@click.group(
    "cluster", cls=helpgroups.Group, topics="cluster", context_settings=cli.COMMAND_CONTEXT
)
def command() -> None:
    """A real control plane (etcd, kube-apiserver, controller-manager, scheduler) on loopback."""


_DIR = click.option(
    "--dir",
    "directory",
    required=True,
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    help="Where the cluster keeps its PKI, data, logs and admin.kubeconfig (`up`: missing, "
    "empty, or one `up` made).",
)
_BIN_DIR = click.option(
    "--bin-dir",
    default=None,
    help="Directory of the Go-built binaries (default: $EDGEHUB_K8S_BIN, else the newest "
    "complete build under ~/.cache/edgehub).",
)


@command.command(
    "up", cls=helpgroups.Command, topics="cluster up", context_settings=cli.COMMAND_CONTEXT
)
@_DIR
@_BIN_DIR
@click.option("--timeout", default=90.0, type=click.FloatRange(min=1), help="Seconds to wait.")
def up(directory: pathlib.Path, bin_dir: str | None, timeout: float) -> None:
    """Start the control plane in the background and return once it serves."""
    try:
        # Before anything else: a directory of the user's is never written to.
        workdirs.check(directory, realcluster.MARKER)
    except workdirs.NotOursError as e:
        click.echo(f"edgehub cluster: {e}: choose another with --dir", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    binaries = _binaries(bin_dir)
    cluster = realcluster.RealCluster(directory, binaries)
    if cluster.layout.state.exists():
        click.echo(
            f"edgehub cluster: {directory} already holds a cluster; "
            f"run `edgehub cluster down --dir {directory}` first",
            err=True,
        )
        raise SystemExit(cli.EXIT_STARTUP_FAILURE)
    try:
        cluster.up(timeout=timeout)
    except processes.ProcessError as e:
        click.echo(f"edgehub cluster: {e}", err=True)
        raise SystemExit(1) from e
    click.echo(f"apiserver={cluster.url} kubeconfig={cluster.admin_kubeconfig}")


@command.command(
    "down", cls=helpgroups.Command, topics="cluster down", context_settings=cli.COMMAND_CONTEXT
)
@_DIR
def down(directory: pathlib.Path) -> None:
    """Stop every process `up` started in DIR (nothing running there is not an error)."""
    try:
        stopped = realcluster.down(directory)
    except processes.ProcessError as e:
        click.echo(f"edgehub cluster: {e}", err=True)
        raise SystemExit(1) from e
    click.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@command.command(
    "node", cls=helpgroups.Command, topics="cluster node", context_settings=cli.COMMAND_CONTEXT
)
@_DIR
@_BIN_DIR
@click.option("--name", required=True, help="The node's name.")
@click.option(
    "--server",
    required=True,
    help="URL kubelet and kube-proxy talk to: the hub's proxy, e.g. http://127.0.0.1:10261.",
)
@click.option("--no-proxy", is_flag=True, help="Run the hollow kubelet only.")
def node(
    directory: pathlib.Path, bin_dir: str | None, name: str, server: str, no_proxy: bool
) -> None:
    """Run a kubemark hollow node (kubelet + kube-proxy) until SIGINT/SIGTERM.

    The node's identity (system:node:NAME) is written to DIR/nodes/NAME.kubeconfig for the hub
    to use as --kubeconfig; the hollow components themselves carry no credentials.
    """
    binaries = _binaries(bin_dir)
    try:
        cluster = realcluster.RealCluster.attach(directory, binaries)
    except processes.ProcessError as e:
        click.echo(f"edgehub cluster: {e} (run `edgehub cluster up` first)", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    identity = cluster.node_kubeconfig(name, extra_groups=("openyurt:yurthub",))
    hollow = hollownodes.HollowNode(
        binaries,
        name,
        server=server,
        workdir=directory / "hollow" / name,
        proxy=not no_proxy,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    hollow.start()
    click.echo(f"node={name} identity={identity} kubelet-log={hollow.kubelet_log}")
    try:
        while not stop.wait(1.0):
            hollow.check_alive()
    except processes.ProcessError as e:
        click.echo(f"edgehub cluster: {e}", err=True)
        raise SystemExit(1) from e
    finally:
        hollow.stop()
