"""Assembling the agent: ``Agent(settings)`` with ``start``/``stop``, and ``run(settings)``.

One supervisor task (``_main``) owns everything through a TaskGroup: the
handler registry (and its registration socket), the Configuration/Instance
reflectors and reconcile workers, the device-plugin manager, the slot
reclaimer, the metrics endpoint and the check that the agent's Node exists
(``nodechecking``: said once when it does not; the agent keeps running).
``start`` returns once the caches are synced and plugins can be served;
``stop`` cancels the supervisor and waits for it to unwind (plugins stopped
and their sockets removed, registry socket removed, API client closed). A
crash of any part ends the supervisor, and the error is raised from ``stop``
(or ``wait``) — which is why the plugin manager contains a plugin's failure
to start or register (``plugins``): one unservable device must not take
discovery down for every other.

Behind the hub: build ``AgentSettings`` with ``KubeSettings(url=<hub proxy
URL>)`` (the DaemonSet passes ``--server-addr=http://127.0.0.1:10261`` and its
ServiceAccount token) so every API call goes through the hub and keeps working
from its cache while the cloud is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from discovery import grpcserving, registry, sdk
from discovery.agent import metrics, nodechecking, plugins, reclaiming, reconciling, settings
from kubecontrol import events, kubeapi

logger = logging.getLogger(__name__)


class StartupError(Exception):
    """The agent could not start (bad settings, unreachable files, unknown handler)."""


class Agent:
    def __init__(self, agent_settings: settings.AgentSettings) -> None:
        self.settings = agent_settings
        self.metrics = metrics.Metrics()
        self.metrics.registry.register(metrics.HandlerEndpoints(self._handler_endpoints))
        self.metrics_port: int | None = None
        self.reconciler: reconciling.Reconciler | None = None
        self.plugins: plugins.Manager | None = None
        self.reclaimer: reclaiming.Reclaimer | None = None
        self.registry: registry.Registry | None = None
        self.node_check: nodechecking.NodeCheck | None = None
        self._ready = asyncio.Event()
        self._settled = asyncio.Event()  # ready, or the supervisor ended
        self._done = asyncio.Event()
        self._failure: BaseException | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._main_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start everything; returns once the caches are synced. Raises the startup failure."""
        if self._stack is not None:
            raise RuntimeError("agent already started")
        stack = contextlib.AsyncExitStack()
        tg = await stack.enter_async_context(asyncio.TaskGroup())
        self._stack = stack
        self._main_task = tg.create_task(
            self._supervise(), name=f"edgehub agent {self.settings.node_name}"
        )
        try:
            await self._settled.wait()
        finally:
            # Failed, or cancelled while waiting (SIGTERM before the apiserver answered): stop
            # what was started, else it would outlive its owner. A failure is raised here.
            if not self._ready.is_set():
                await self.stop()

    async def stop(self) -> None:
        """Stop everything and wait for it; raises what made the agent fail, if anything."""
        stack, self._stack = self._stack, None
        if stack is not None:
            if self._main_task is not None:
                self._main_task.cancel()
            await stack.aclose()
        if self._failure is not None:
            raise self._failure

    async def wait(self) -> None:
        """Until the agent stops; raises what made it fail."""
        await self._done.wait()
        if self._failure is not None:
            raise self._failure

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and not self._done.is_set()

    def _handler_endpoints(self) -> dict[str, int]:
        """Endpoints per handler name, and 0 for names Configurations wait for."""
        counts: dict[str, int] = {}
        if self.reconciler is not None:
            for obj in self.reconciler.configurations.store.values():
                handler = ((obj.get("spec") or {}).get("discoveryHandler") or {}).get("name")
                if isinstance(handler, str) and handler:
                    counts[handler] = 0
        if self.registry is not None:
            for endpoint in self.registry.endpoints():
                counts[endpoint.name] = counts.get(endpoint.name, 0) + 1
        return counts

    def status(self) -> dict[str, Any]:
        """What ``edgehub status`` shows of discovery on this node: handlers and their
        endpoints, Configurations and the Instances (devices) this node serves, whether kubelet's
        device-plugin socket is there. Names and counts only: never a device's properties (they
        may hold credentials)."""
        s = self.settings
        handlers: dict[str, int] = {}
        if self.registry is not None:
            for endpoint in self.registry.endpoints():
                handlers[endpoint.name] = handlers.get(endpoint.name, 0) + 1
        configurations: dict[tuple[str, str], dict[str, Any]] = {}
        if self.reconciler is not None:
            for (namespace, name), obj in sorted(self.reconciler.configurations.store.items()):
                spec = obj.get("spec") or {}
                handler = str((spec.get("discoveryHandler") or {}).get("name") or "")
                configurations[(namespace, name)] = {
                    "namespace": namespace,
                    "name": name,
                    "handler": handler,
                    "handlerRegistered": handler in handlers,
                    "instances": [],
                }
        kubelet_socket = None
        if self.plugins is not None:
            kubelet_socket = self.plugins.kubelet_socket_present
            for (namespace, name), plugin in sorted(self.plugins.instance_plugins.items()):
                entry = configurations.setdefault(
                    (namespace, plugin.configuration),
                    {
                        "namespace": namespace,
                        "name": plugin.configuration,
                        "handler": "",
                        "handlerRegistered": False,
                        "instances": [],
                    },
                )
                entry["instances"].append(
                    {
                        "name": name,
                        "resource": plugin.resource,
                        "registeredWithKubelet": plugin.registered,
                        "slots": len(plugin.slots),
                        "slotsInUse": sum(1 for usage in plugin.slots if usage is not None),
                    }
                )
        return {
            "node": s.node_name,
            "ready": self.ready,
            "kubeletSocket": {
                "path": str(s.device_plugins_dir / "kubelet.sock"),
                "present": kubelet_socket,
            },
            "handlers": [{"name": n, "endpoints": c} for n, c in sorted(handlers.items())],
            "configurations": list(configurations.values()),
        }

    async def _supervise(self) -> None:
        try:
            await self._main()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            failure: BaseException = e
            while isinstance(failure, BaseExceptionGroup) and len(failure.exceptions) == 1:
                failure = failure.exceptions[0]
            self._failure = failure
            # A startup error is a clear message for the operator, not a bug: no traceback.
            trace = None if isinstance(failure, StartupError) else failure
            logger.error("agent failed: %s", failure, exc_info=trace)
        finally:
            self._done.set()
            self._settled.set()

    async def _main(self) -> None:
        s = self.settings
        async with contextlib.AsyncExitStack() as stack:
            api_client = await _connect(s)
            stack.push_async_callback(api_client.close)
            api = kubeapi.KubeApi(api_client, s.kube.request_timeout)
            if s.metrics_port is not None:
                try:
                    runner, self.metrics_port = await metrics.serve(
                        self.metrics,
                        s.metrics_address,
                        s.metrics_port,
                        lambda: self.ready,
                        status=self.status,
                    )
                except OSError as e:  # address in use, not an address of this host
                    raise StartupError(f"cannot serve metrics: {e.strerror or e}") from e
                stack.push_async_callback(runner.cleanup)
            try:
                reg = await stack.enter_async_context(
                    registry.running(
                        registry.RegistrySettings(
                            directory=s.discovery_handlers_dir,
                            handler_networks=s.handler_networks,
                            writable_mount_handlers=s.writable_mount_handlers,
                            protected_paths=settings.protected_paths(s),
                            protected_trees=settings.protected_trees(s),
                        )
                    )
                )
            except grpcserving.ServeError as e:
                raise StartupError(f"discovery handlers directory: {e}") from e
            self.registry = reg
            for name in s.embedded_handlers:
                try:
                    handler = sdk.load(name, sdk.HandlerOptions(environ=dict(s.handler_environ)))
                except (sdk.HandlerNotFoundError, ValueError) as e:
                    raise StartupError(f"embedded handler {name}: {e}") from e
                reg.register_embedded(handler)
            # One recorder: its repeat suppression then covers every Event the agent posts.
            recorder = events.Recorder(api, s.node_name)
            manager = plugins.Manager(s, api, self.metrics, recorder)
            self.plugins = manager
            reconciler = reconciling.Reconciler(
                s,
                api,
                reg,
                manager,
                self.metrics,
                recorder,
                on_instance_event=manager.on_instance_event,
            )
            self.reconciler = reconciler
            self.node_check = nodechecking.NodeCheck(
                api, s.node_name, s.timings.node_check_initial, s.timings.node_check_cap
            )
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.node_check.run(), name="node check")
                tg.create_task(manager.run(), name="device plugins")
                await reconciler.run(tg, on_snapshot=self.metrics.discovery_snapshot)
                if s.pod_resources_socket is not None:
                    self.reclaimer = reclaiming.Reclaimer(
                        s, api, manager.held_slots, manager.namespace_of
                    )
                    tg.create_task(self.reclaimer.run(), name="slot reclaimer")
                logger.info("agent for node %s is running", s.node_name)
                self._ready.set()
                self._settled.set()


async def _connect(s: settings.AgentSettings) -> Any:
    try:
        return await kubeapi.connect(
            s.kube.url, s.kube.kubeconfig, s.kube.user_agent, s.kube.service_account
        )
    except kubeapi.KubeError as e:
        raise StartupError(str(e)) from e


@contextlib.asynccontextmanager
async def running(agent_settings: settings.AgentSettings) -> AsyncIterator[Agent]:
    agent = Agent(agent_settings)
    await agent.start()
    try:
        yield agent
    finally:
        await agent.stop()


async def run(agent_settings: settings.AgentSettings) -> None:
    """Run the agent until cancelled (the CLI cancels on SIGTERM/SIGINT)."""
    async with running(agent_settings) as agent:
        await agent.wait()
