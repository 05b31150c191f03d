"""``edgehub demo``: the whole story on a simulated cloud, in about 15 seconds, then stays up.

The cast, all in this process and all on loopback:

- a simulated kube-apiserver (the "cloud", ``--seed demo``);
- a partition injector between the hub and the cloud (the "link" we cut);
- the hub for node ``edge-node-1`` with its disk cache under ``<workdir>/cache``;
- a kubelet-like client and the real ``kubectl`` talking to the hub;
- the discovery agent with the embedded debugEcho handler, and a simulated kubelet that
  receives its device plugins;
- ``edgehub manager``'s broker controller, which runs a broker pod per device (the simulated
  cloud schedules and "runs" pods: no containers).

Chapters: cloud up -> reads through the hub -> devices appear with their broker pods (and go
OFFLINE, brokers and all, and come back) -> link cut (reads from cache, watches held, writes
answered) -> link restored (converged).
Then it stays up with the commands to try printed, until Ctrl-C (``--exit`` ends instead:
the e2e test runs it that way).

Everything the demo writes lives in ``--workdir`` (default ``./demo``): kubeconfigs for the
cloud and the hub, the cache, sockets. The demo makes that directory and marks it
(``MARKER``); only a directory so marked is emptied at the start of a run. An existing
directory without the marker (the user's own ``demo`` folder) is refused with one line and
exit 3, untouched (``yurthub.testing.workdirs``); an empty one is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pathlib
import shutil
import signal
import socket
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import click
import orjson
import yaml

from discovery.agent import running as agent_running
from discovery.agent import settings as agent_settings
from discovery.testing import kubelet as sim_kubelet
from edgehub import cli, helpgroups, status
from kubecontrol import controlling
from managers import running as manager_running
from managers import settings as manager_settings
from yurthub import assembly, settings
from yurthub.testing import kubelet, partition, simapiserver, workdirs

NODE = "edge-node-1"
POOL = "edge-pool"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
CRDS = pathlib.Path(__file__).resolve().parents[2] / "manifests" / "crds"
DEBUG_ECHO_CONFIG = {
    "apiVersion": "akri.sh/v0",
    "kind": "Configuration",
    "metadata": {"name": "akri-debug-echo", "namespace": "default"},
    "spec": {
        "discoveryHandler": {
            "name": "debugEcho",
            "discoveryDetails": "descriptions:\n- camera-front\n- camera-back\n",
        },
        "capacity": 2,
        "brokerProperties": {"SITE": "factory-7"},
        # One broker pod per camera and node, holding one of its slots; a Service in front.
        "brokerSpec": {
            "brokerPodSpec": {
                "containers": [
                    {
                        "name": "camera-broker",
                        "image": "nginx:stable",
                        "resources": {"limits": {"{{PLACEHOLDER}}": "1"}},
                    }
                ]
            }
        },
        "instanceServiceSpec": {"ports": [{"name": "http", "port": 80}]},
    },
}
BROKER_SELECTOR = "akri.sh/configuration=akri-debug-echo"
MARKER = ".edgehub-demo"
"""Written into the workdir the demo makes: only a directory holding it is ever emptied."""


class DemoFailed(Exception):
    """A step of the story did not turn out as the demo promises."""


@dataclasses.dataclass
class Progress:
    """Prints one line per step: elapsed time, a mark, and what happened."""

    color: bool
    binary: str = "edgehub"
    """How the user runs edgehub (``make demo``: ``.venv/bin/edgehub``, maybe not on PATH)."""
    started: float = dataclasses.field(default_factory=time.monotonic)

    def _stamp(self) -> str:
        return f"[{time.monotonic() - self.started:5.1f}s]"

    def chapter(self, title: str) -> None:
        text = f"\n== {title}"
        click.echo(click.style(text, bold=True) if self.color else text)

    def ok(self, text: str) -> None:
        mark = click.style("ok ", fg="green") if self.color else "ok "
        click.echo(f"{self._stamp()} {mark} {text}")

    def info(self, text: str) -> None:
        click.echo(f"{self._stamp()}     {text}")

    def cmd(self, text: str) -> None:
        line = f"    $ {text}"
        click.echo(click.style(line, fg="cyan") if self.color else line)


async def _eventually(
    what: str, check: Callable[[], Awaitable[bool]], *, within: float, every: float = 0.2
) -> float:
    """Wait until ``check()`` is true; return the seconds it took. Raise ``DemoFailed``."""
    start = time.monotonic()
    deadline = start + within
    while True:
        if await check():
            return time.monotonic() - start
        if time.monotonic() > deadline:
            raise DemoFailed(f"{what}: not within {within:.0f} s")
        await asyncio.sleep(every)


async def _kubectl(kubeconfig: pathlib.Path, *args: str, wait: float = 20.0) -> str:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        "--request-timeout",
        "10s",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECACHEDIR": str(kubeconfig.parent / ".kube-cache")},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), wait)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise DemoFailed(f"kubectl {' '.join(args)}: no answer within {wait:.0f} s") from None
    if proc.returncode != 0:
        raise DemoFailed(f"kubectl {' '.join(args)}: {err.decode(errors='replace').strip()}")
    return out.decode()


def _count_items(json_text: str) -> int:
    return len(orjson.loads(json_text).get("items") or [])


def _free_port_or_zero(port: int) -> int:
    """The YurtHub default port when it is free, else 0 (pick one): the demo must start."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return 0
    return port


def _write_proxy_kubeconfig(path: pathlib.Path, proxy_url: str) -> pathlib.Path:
    """A kubeconfig pointing at the hub's plain-HTTP proxy (loopback, no credentials)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "edge-hub", "cluster": {"server": proxy_url}}],
        "users": [{"name": "kubelet-like", "user": {}}],
        "contexts": [
            {"name": "edge-hub", "context": {"cluster": "edge-hub", "user": "kubelet-like"}}
        ],
        "current-context": "edge-hub",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@contextlib.asynccontextmanager
async def _cast(workdir: pathlib.Path, out: Progress) -> AsyncIterator[dict[str, Any]]:
    """Start everything; yield the handles; stop everything in reverse."""
    async with contextlib.AsyncExitStack() as stack:
        sim = simapiserver.SimApiserver(seed="demo", workdir=workdir / "cloud")
        await sim.start()
        stack.push_async_callback(sim.stop)
        admin = workdir / "kubeconfig"
        shutil.copyfile(sim.kubeconfig_path, admin)
        out.ok(f"cloud up: simulated kube-apiserver at {sim.url}")
        out.cmd(f"kubectl --kubeconfig {admin} get nodes")
        for crd in sorted(CRDS.glob("*.yaml")):
            await _kubectl(admin, "apply", "-f", str(crd))
        out.ok("installed the Akri-compatible CRDs (configurations.akri.sh, instances.akri.sh)")

        link = partition.Partition("127.0.0.1", sim.port)
        await stack.enter_async_context(link)
        out.ok(f"link up: partition injector {link.address} -> {sim.url} (mode pass)")

        identity = sim.write_kubeconfig(
            workdir / "hub-identity.kubeconfig", user=f"system:node:{NODE}"
        )
        hub_settings = settings.HubSettings(
            node_name=NODE,
            nodepool_name=POOL,
            # The link is a TCP relay: TLS runs end to end between the hub and the cloud.
            upstream=settings.UpstreamSettings(
                servers=(f"https://{link.address}",), kubeconfig=identity
            ),
            listen=settings.ListenSettings(
                serve_port=_free_port_or_zero(10267), proxy_port=_free_port_or_zero(10261)
            ),
            heartbeat=settings.HeartbeatSettings(interval=1.0, timeout=1.0),
            proxy=settings.ProxySettings(min_request_timeout=300.0, shutdown_grace=2.0),
            cache=settings.CacheSettings(
                disk_cache_path=workdir / "cache",
                # kubectl and the agent are not YurtHub default cache agents; the demo wants
                # them to keep working offline, as an operator would with --cache-agents.
                cache_agents=("kubectl", "edgehub-agent"),
                bookmark_interval=5.0,
            ),
        )
        node = await stack.enter_async_context(assembly.running(hub_settings))
        hub_kubeconfig = _write_proxy_kubeconfig(workdir / "hub.kubeconfig", node.hub.proxy_url)
        out.ok(f"hub up for {NODE}: proxy {node.hub.proxy_url}, server {node.hub.server_url}")
        out.cmd(f"kubectl --kubeconfig {hub_kubeconfig} get pods -A")

        plugins_dir = workdir / "kubelet" / "device-plugins"
        plugins_dir.mkdir(parents=True)
        fake_kubelet = await stack.enter_async_context(sim_kubelet.SimKubelet(plugins_dir))
        availability = workdir / "debug-echo-availability.txt"
        availability.write_text("ONLINE\n")
        agent = agent_running.Agent(
            agent_settings.AgentSettings(
                node_name=NODE,
                kube=agent_settings.KubeSettings(
                    url=node.hub.proxy_url, user_agent="edgehub-agent/demo"
                ),
                # Embedded handlers only: no registration socket, so no window in which a
                # restarted agent waits for external handlers to come back.
                discovery_handlers_dir=None,
                embedded_handlers=("debugEcho",),
                handler_environ={
                    "DEBUG_ECHO_INSTANCES_SHARED": "true",
                    "DEBUG_ECHO_AVAILABILITY_FILE": str(availability),
                    "DEBUG_ECHO_POLL_SECONDS": "0.5",
                },
                device_plugins_dir=plugins_dir,
                pod_resources_socket=None,
                cdi_dir=workdir / "cdi",
                metrics_port=None,
            )
        )
        await agent.start()
        stack.push_async_callback(agent.stop)

        async def discovery_status() -> dict[str, Any]:
            return agent.status()

        # As `edgehub hub --enable-discovery` does: `edgehub status` shows the devices too.
        node.hub.status_sections["discovery"] = discovery_status
        out.ok("discovery agent up (embedded debugEcho handler), API traffic through the hub")

        # The cloud side: edgehub manager's broker controller, in this process.
        quick = controlling.Timings(workers=2, resync=None, backoff_initial=0.2, backoff_cap=2.0)
        await stack.enter_async_context(
            manager_running.running(
                manager_settings.ManagerSettings(
                    controllers=("brokers", "nodewatcher"),
                    kube=manager_settings.KubeSettings(
                        kubeconfig=admin, user_agent="edgehub-manager/demo"
                    ),
                    leader_election=manager_settings.LeaderElection(enabled=False),
                    health_port=None,
                    host="demo",
                    brokers=manager_settings.Brokers(timings=quick),
                    node_watcher=manager_settings.NodeWatcher(timings=quick),
                )
            )
        )
        out.ok("edgehub manager up in the cloud (broker controller, node watcher)")

        yield {
            "sim": sim,
            "link": link,
            "node": node,
            "admin": admin,
            "hub_kubeconfig": hub_kubeconfig,
            "kubelet_sim": fake_kubelet,
            "availability": availability,
        }


async def _story(workdir: pathlib.Path, out: Progress, stay: bool) -> None:
    out.chapter("1. The cloud is up")
    async with _cast(workdir, out) as cast:
        sim: simapiserver.SimApiserver = cast["sim"]
        link: partition.Partition = cast["link"]
        node: assembly.Node = cast["node"]
        admin: pathlib.Path = cast["admin"]
        via_hub: pathlib.Path = cast["hub_kubeconfig"]
        hub = node.hub
        assert hub.health is not None

        out.chapter("2. Node components talk to the hub")
        client = kubelet.KubeletClient(hub.proxy_url, NODE, lease_interval=1.0)
        async with asyncio.TaskGroup() as tg:
            kubelet_task = tg.create_task(client.run(), name="demo-kubelet-like")
            try:
                await _chapters(workdir, out, cast, client, sim, link, node, admin, via_hub)
            finally:
                kubelet_task.cancel()
        if stay:
            await _stay_up(out, cast)


async def _chapters(
    workdir: pathlib.Path,
    out: Progress,
    cast: dict[str, Any],
    client: kubelet.KubeletClient,
    sim: simapiserver.SimApiserver,
    link: partition.Partition,
    node: assembly.Node,
    admin: pathlib.Path,
    via_hub: pathlib.Path,
) -> None:
    hub = node.hub
    health = hub.health
    assert health is not None

    async def kubelet_has_pods() -> bool:
        return bool(client.pods)

    await _eventually("kubelet-like client lists its pods", kubelet_has_pods, within=10)
    out.ok(f"kubelet-like client: {len(client.pods)} pods of {NODE} listed and watched via the hub")
    online = _count_items(await _kubectl(via_hub, "get", "pods", "-A", "-o", "json"))
    direct = _count_items(await _kubectl(admin, "get", "pods", "-A", "-o", "json"))
    if online != direct:
        raise DemoFailed(f"kubectl via hub saw {online} pods, direct {direct}")
    out.ok(f"kubectl get pods -A through the hub: {online} pods (same as direct)")
    await _kubectl(via_hub, "get", "nodes", "-o", "json")
    await _kubectl(via_hub, "get", "services", "-A", "-o", "json")
    out.ok("kubectl get nodes/services through the hub: cached on the way")

    out.chapter("3. Devices show up by themselves")
    config_file = workdir / "debug-echo-configuration.yaml"
    config_file.write_text(yaml.safe_dump(DEBUG_ECHO_CONFIG))
    await _kubectl(admin, "apply", "-f", str(config_file))
    out.ok("applied a debugEcho Configuration (2 devices, capacity 2, a broker pod per device)")
    out.cmd(f"kubectl --kubeconfig {admin} get akrii,pods,svc -l controller=akri.sh")

    async def instances(expected: int) -> bool:
        return _count_items(await _kubectl(admin, "get", "akrii", "-o", "json")) == expected

    async def running_brokers() -> list[str]:
        listed = orjson.loads(
            await _kubectl(admin, "get", "pods", "-l", BROKER_SELECTOR, "-o", "json")
        )
        return sorted(
            p["metadata"]["name"]
            for p in listed.get("items") or []
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        )

    async def brokers(expected: int) -> bool:
        return len(await running_brokers()) == expected

    took = await _eventually("Instances appear", lambda: instances(2), within=20)
    names = (await _kubectl(admin, "get", "akrii", "-o", "name")).split()
    out.ok(f"{len(names)} Instances in {took:.1f} s: {', '.join(n.split('/')[-1] for n in names)}")
    took = await _eventually("broker pods run", lambda: brokers(2), within=20)
    out.ok(
        f"2 broker pods Running on {NODE} after {took:.1f} s: {', '.join(await running_brokers())}"
    )
    fake_kubelet: sim_kubelet.SimKubelet = cast["kubelet_sim"]
    await fake_kubelet.wait_for(lambda: len(fake_kubelet.plugins) >= 2, within=15)
    out.ok(f"kubelet got device plugins: {', '.join(sorted(fake_kubelet.plugins))}")
    availability: pathlib.Path = cast["availability"]
    await asyncio.to_thread(availability.write_text, "OFFLINE\n")
    took = await _eventually("Instances go away", lambda: instances(0), within=20)
    out.ok(f"devices OFFLINE -> Instances removed in {took:.1f} s")
    took = await _eventually("broker pods stop", lambda: brokers(0), within=20)
    out.ok(f"... and their broker pods stopped ({took:.1f} s later)")
    await asyncio.to_thread(availability.write_text, "ONLINE\n")
    took = await _eventually("Instances come back", lambda: instances(2), within=20)
    out.ok(f"devices ONLINE again -> Instances restored in {took:.1f} s")
    took = await _eventually("broker pods run again", lambda: brokers(2), within=20)
    out.ok(f"... and their broker pods Running again ({took:.1f} s later)")

    out.chapter("4. The link to the cloud is cut")
    await link.set_mode(partition.Mode.BLACKHOLE)
    cut_at = time.monotonic()
    out.info("partition injector: blackhole (packets vanish, connections stall)")

    async def offline() -> bool:
        return not health.any_healthy()

    took = await _eventually("hub notices the cloud is gone", offline, within=15)
    out.ok(f"hub detected the partition after {took:.1f} s")
    cached = _count_items(await _kubectl(via_hub, "get", "pods", "-A", "-o", "json"))
    out.ok(f"kubectl get pods -A still answers: {cached} pods from the disk cache")
    out.info(f"what an operator on the node sees: {out.binary} status --server {hub.server_url}")
    screen = await asyncio.to_thread(
        lambda: status.screen(status.collect(hub.server_url, agent=""))
    )
    click.echo(textwrap.indent(screen.rstrip("\n"), "      "))
    table = await _kubectl(via_hub, "get", "pods", "-n", "kube-system")
    out.ok(f"kubectl table view offline ({len(table.splitlines()) - 1} rows from cache)")
    # A change in the cloud while the node cannot see it: the node must converge later.
    sim.state.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "late-arrival", "namespace": "default", "labels": {"app": "late"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": "Pending"},
        }
    )
    out.info("meanwhile in the cloud: pod default/late-arrival scheduled to this node")
    await asyncio.sleep(2.0)
    read_failures = client.failures_after(cut_at + 3.0, reads_only=True)
    if read_failures:
        raise DemoFailed(f"kubelet-like reads failed offline: {read_failures[:3]}")
    out.ok(
        "kubelet-like client: no failed read offline; its watches are held open, "
        "its lease is answered locally"
    )

    out.chapter("5. The link comes back")
    await link.set_mode(partition.Mode.PASS)
    healed_at = time.monotonic()

    async def online_again() -> bool:
        return health.any_healthy()

    took = await _eventually("hub sees the cloud again", online_again, within=15)
    out.ok(f"hub healthy again after {took:.1f} s")

    async def converged() -> bool:
        return any(p.endswith("/late-arrival") for p in client.pods)

    took = await _eventually("kubelet sees the pod created offline", converged, within=20)
    out.ok(f"converged: kubelet-like client saw default/late-arrival {took:.1f} s after heal")
    total = time.monotonic() - healed_at
    out.info(f"watch re-establishments per resource: {dict(client.watch_starts)} ({total:.1f} s)")


async def _stay_up(out: Progress, cast: dict[str, Any]) -> None:
    node: assembly.Node = cast["node"]
    link: partition.Partition = cast["link"]
    out.chapter("Still running. Try:")
    out.cmd(f"kubectl --kubeconfig {cast['hub_kubeconfig']} get pods -A   # via the hub")
    out.cmd(
        f"kubectl --kubeconfig {cast['admin']} get akrii                  # straight to the cloud"
    )
    out.cmd(f"{out.binary} status --server {node.hub.server_url}    # or type 'status' here")
    out.cmd(f"curl -s {node.hub.server_url}/v1/readyz; curl -s {node.hub.server_url}/metrics")
    out.cmd(f"{out.binary} cache ls --disk-cache-path {node.hub.settings.cache.disk_cache_path}")
    out.info("Press Ctrl-C to stop (type 'cut' or 'heal' + Enter to switch the link, 'status').")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with asyncio.TaskGroup() as tg:
            commands = None
            if sys.stdin.isatty():
                commands = tg.create_task(
                    _commands(link, out, node.hub.server_url), name="demo-commands"
                )
            await stop.wait()
            if commands is not None:
                commands.cancel()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    out.info("stopping")


async def _commands(
    link: partition.Partition, out: Progress, hub_server: str, stream: Any = None
) -> None:
    """Read ``cut`` / ``heal`` / ``status`` lines from the terminal (``stream``: stdin) and act;
    any other word is answered with the ones known, never ignored."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), stream if stream is not None else sys.stdin
    )
    try:
        while line := await reader.readline():
            word = line.decode(errors="replace").strip().lower()
            if word == "cut":
                await link.set_mode(partition.Mode.BLACKHOLE)
                out.info("link cut (blackhole)")
            elif word == "heal":
                await link.set_mode(partition.Mode.PASS)
                out.info("link restored")
            elif word == "status":
                found = await asyncio.to_thread(status.collect, hub_server, "")
                click.echo(status.screen(found), nl=False)
            elif word:
                out.info(f"unknown command {word!r}: type cut, heal or status (Ctrl-C stops)")
    finally:
        transport.close()


@click.command(cls=helpgroups.Command, topics="demo", context_settings=cli.COMMAND_CONTEXT)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    default=pathlib.Path("demo"),
    help="Where kubeconfigs, the cache and sockets go: a directory the demo makes, emptied at "
    "start (an existing one of yours is refused).",
)
@click.option("--exit/--stay", "exit_after", default=False, help="End after the story.")
def command(workdir: pathlib.Path, exit_after: bool) -> None:
    """Walk through edgehub on an embedded simulated cloud: online, devices, offline, back."""
    if logging.getLogger().getEffectiveLevel() == logging.INFO:
        # The story is the output; INFO logs of six components would drown it.
        logging.getLogger().setLevel(logging.WARNING)
    workdir = workdir.resolve()
    note = "made by `edgehub demo`, which empties this directory at every start"
    try:
        workdirs.claim(workdir, MARKER, note, clear=True)
    except workdirs.NotOursError as e:
        click.echo(f"edgehub demo: {e}: choose another with --workdir", err=True)
        sys.exit(cli.EXIT_STARTUP_FAILURE)
    except OSError as e:
        click.echo(f"edgehub demo: cannot prepare {workdir}: {e.strerror or e}", err=True)
        sys.exit(cli.EXIT_STARTUP_FAILURE)
    binary = os.path.abspath(sys.argv[0]) if sys.argv[0].endswith("edgehub") else "edgehub"
    out = Progress(color=sys.stdout.isatty(), binary=binary)
    click.echo(f"edgehub demo: everything runs on loopback; files in {workdir}")
    try:
        asyncio.run(_story(workdir, out, stay=not exit_after))
    except DemoFailed as e:
        click.echo(f"demo failed: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        pass
    click.echo("demo finished")
