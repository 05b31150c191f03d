"""Kubelet device plugins: one per Instance on this node, one per Configuration.

Instance plugin: resource ``akri.sh/<instance>``, one device per capacity slot
(``<instance>-<i>``), Healthy when the slot is free or held by this node
through the Instance resource (``slots.instance_health``). Configuration
plugin: resource ``akri.sh/<config>``, virtual devices (``slots.assign_vdevs``),
all Healthy. Allocate claims slots in ``Instance.spec.deviceUsage`` with an
RV-guarded write (``instances.write``), so a slot held by another node — or
won by another node in a race — fails the allocation with a clear status,
and answers with env (``K`` and ``K_<HASH>``), mounts, device specs and the
CDI device name (only when the CDI spec file exists, else the runtime would
fail to resolve it).

``Manager`` owns every plugin. Inputs arrive as plain notifications (named
devices from the reconciler, Instance events from the reflector) and only
mark the manager dirty; one ``run`` loop converges plugins to them, so
starting and stopping gRPC servers never races with itself. The same loop
polls kubelet's socket: when kubelet restarts, every plugin is restarted on a
fresh socket and registered again.

Failure containment: a plugin that cannot be served (its socket cannot be
bound: directory unwritable or too long, grpc refusing) or that kubelet will
not register stays in the manager as *failed*: logged once per distinct
error, a Warning Event on its Instance (the Configuration for a
Configuration plugin), retried with the agent's capped back-off
(``Timings.backoff_initial``/``backoff_cap``, reset when kubelet restarts).
Every other plugin and the reconcile loop carry on; nothing a plugin does
can end ``run``. Events go out through a bounded queue drained by their own
task, so an unreachable apiserver never stalls convergence.

The same holds for what an Instance says: its ``capacity`` and ``deviceUsage``
are written by other nodes, controllers and users. One that does not parse
(``slots.InvalidUsage``: a key that is not a canonical ASCII slot id of this
Instance, a malformed value, a capacity outside ``0..max_capacity``) or that
makes its update fail in any other way puts that Instance alone *out of
service*: every slot of its plugin is Unhealthy and it offers no vdev to the
Configuration plugin (nothing is handed out on a table we cannot read), its
slots are not reclaimed, a Warning Event ``InvalidInstance`` names the field,
one log line says it, and it is re-read with the same capped back-off, or at
once when the object changes. Allocate on it fails with FAILED_PRECONDITION
naming the field.

Dangers: kubelet calls Allocate with a short deadline; the claim is one
apiserver round trip (more on conflicts). When the apiserver is unreachable,
Allocate fails rather than handing out a slot nobody recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import grpc
import grpc.aio

from discovery import grpcserving
from discovery.agent import cdi, discovered, instances, kubelet, naming, settings, slots
from discovery.proto import deviceplugin_v1beta1_pb2 as pb
from discovery.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from kubecontrol import events, kubeapi

logger = logging.getLogger(__name__)

Key = tuple[str, str]

START_FAILED = "DevicePluginFailed"
"""Event reason: the plugin's gRPC server could not be started."""
REGISTRATION_FAILED = "DevicePluginRegistrationFailed"
"""Event reason: kubelet did not accept the plugin's registration."""
INVALID_INSTANCE = "InvalidInstance"
"""Event reason: an Instance's capacity/deviceUsage cannot be read; it is out of service."""
_EVENT_QUEUE = 64
SOCKET_MODE = 0o660
"""Plugin sockets: kubelet (root) dials them; set explicitly, not by umask."""


class PluginStartFailed(Exception):
    """A device plugin's server could not be started; the message names the path and why."""


class Metrics(Protocol):
    def set_slots(self, instance: str, used: int, capacity: int) -> None: ...

    def forget_instance(self, instance: str) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class _ConfigDevices:
    named: Mapping[str, discovered.NamedDevice]
    broker_properties: Mapping[str, str]


def _response(allocations: Sequence[cdi.Allocation], with_cdi: bool) -> Any:
    envs: dict[str, str] = {}
    mounts: list[Any] = []
    specs: list[Any] = []
    cdi_names: list[str] = []
    for a in allocations:
        envs.update(a.envs)
        mounts.extend(
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in a.mounts
        )
        specs.extend(
            pb.DeviceSpec(
                container_path=s.container_path, host_path=s.host_path, permissions=s.permissions
            )
            for s in a.device_specs
        )
        if with_cdi and a.cdi_name not in cdi_names:
            cdi_names.append(a.cdi_name)
    return pb.ContainerAllocateResponse(
        envs=envs,
        mounts=mounts,
        devices=specs,
        cdi_devices=[pb.CDIDevice(name=n) for n in cdi_names],
    )


class Plugin(pb_grpc.DevicePluginServicer):
    """One gRPC server on its own socket, registered with kubelet."""

    def __init__(self, manager: Manager, name: str) -> None:
        self.manager = manager
        self.name = name
        self.resource = naming.resource_name(name)
        self.socket: Path | None = None
        self.server: grpc.aio.Server | None = None
        self._bound: grpcserving.BoundSocket | None = None
        self.registered = False
        self.retry_at = 0.0
        """``time.monotonic()`` before which a failed start or registration is not retried."""
        self.backoff: float | None = None
        self.failure: tuple[str, str] | None = None
        """(Event reason, message) of the current failure, ``None`` while healthy."""
        self._devices: list[tuple[str, str]] = []
        self._changed = asyncio.Event()
        self._stopped = False

    # -- state

    @property
    def devices(self) -> list[tuple[str, str]]:
        return list(self._devices)

    def publish(self, devices: list[tuple[str, str]]) -> None:
        if devices == self._devices:
            return
        self._devices = devices
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- lifecycle

    async def start(self, directory: Path) -> None:
        """Serve on a fresh socket in ``directory``; ``PluginStartFailed`` says why not."""
        self._stopped = False
        self.registered = False
        try:
            path = kubelet.socket_path(directory, self.name)
            # Off the loop: the plugins directory may be a slow or broken mount.
            await asyncio.to_thread(grpcserving.prepare_unix_socket, path)
        except kubelet.SocketPathError as e:
            raise PluginStartFailed(f"cannot serve device plugin {self.resource}: {e}") from e
        except grpcserving.ServeError as e:
            # The directory, not the socket path: the path changes every second, and a failure
            # is logged and posted only when its message changes.
            raise PluginStartFailed(
                f"cannot serve device plugin {self.resource} in {directory}: {e.reason}"
            ) from e
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(self, server)  # type: ignore[no-untyped-call]
        staged = None
        try:
            staged = grpcserving.add_unix_port(server, path)
            await server.start()
            bound = await asyncio.to_thread(staged.publish, SOCKET_MODE)
        except BaseException as e:
            if staged is not None:
                await asyncio.to_thread(staged.discard)
            await grpcserving.stop(server, None)
            if isinstance(e, grpcserving.ServeError | RuntimeError | OSError):
                raise PluginStartFailed(
                    f"cannot serve device plugin {self.resource} on {path}: {e}"
                ) from e
            raise
        self.server, self.socket, self._bound = server, path, bound
        logger.info("device plugin %s serving on %s", self.resource, path)

    async def stop(self) -> None:
        self._stopped = True
        self._wake()
        server, path, bound = self.server, self.socket, self._bound
        self.server = self.socket = self._bound = None
        self.registered = False
        try:
            if server is not None:
                await grpcserving.stop(server, 0.5)
        finally:
            if path is not None and bound is not None:
                try:
                    # Only the socket we bound: kubelet or a new plugin may own the path now.
                    # On the loop (two syscalls, as the plain unlink was): an awaited thread
                    # would let a cancelled stop return before the socket is gone.
                    bound.remove()
                except OSError as e:
                    # A read-only directory must not turn a stop into a crash of the manager;
                    # a stale socket is harmless (the next start or kubelet removes it).
                    logger.warning("device plugin %s: cannot remove %s: %s", self.resource, path, e)
                logger.info("device plugin %s stopped", self.resource)

    async def register(self, directory: Path) -> None:
        if self.socket is None:
            return
        await kubelet.register(directory, self.socket, self.resource)
        self.registered = True
        logger.info("device plugin %s registered with kubelet", self.resource)

    # -- DevicePlugin service

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=False
        )

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        sent: list[tuple[str, str]] | None = None
        try:
            while not self._stopped:
                changed = self._changed
                if self._devices != sent:
                    sent = list(self._devices)
                    yield pb.ListAndWatchResponse(
                        devices=[pb.Device(ID=i, health=health) for i, health in sent]
                    )
                await changed.wait()
        finally:
            if not self._stopped:
                # kubelet hung up on a running plugin: it restarted or dropped us.
                self.manager.lost_kubelet(self)

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no preferred allocation")

    async def PreStartContainer(self, request: Any, context: Any) -> Any:
        return pb.PreStartContainerResponse()

    async def Allocate(self, request: Any, context: Any) -> Any:
        try:
            responses = [
                await self.allocate(list(r.devices_ids)) for r in request.container_requests
            ]
        except slots.SlotUnavailable as e:
            logger.warning("%s: allocation refused: %s", self.resource, e)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"unable to claim slot: {e}")
        except slots.InvalidUsage as e:
            logger.warning("%s: allocation refused, invalid Instance: %s", self.resource, e)
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"unable to claim slot: invalid Instance: {e}"
            )
        except (kubeapi.KubeError, instances.WriteFailed) as e:
            logger.warning("%s: allocation could not be recorded: %s", self.resource, e)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot record the claim: {e}")
        return pb.AllocateResponse(container_responses=responses)

    async def allocate(self, device_ids: list[str]) -> Any:
        raise NotImplementedError


@dataclasses.dataclass(slots=True)
class _OutOfService:
    """Why an Instance plugin hands nothing out, and when to read its object again."""

    reason: str
    message: str
    resource_version: str
    backoff: float
    retry_at: float


class InstancePlugin(Plugin):
    def __init__(self, manager: Manager, namespace: str, instance: str, configuration: str):
        super().__init__(manager, instance)
        self.namespace = namespace
        self.configuration = configuration
        self.slots: tuple[naming.SlotUsage, ...] = ()
        """The last table read without error (kept while out of service, for the metrics)."""
        self.out_of_service: _OutOfService | None = None

    def update(self, obj: Mapping[str, Any]) -> None:
        """Read the slot table; ``slots.InvalidUsage`` leaves the plugin unchanged."""
        spec = instances.spec_of(obj)
        self.slots = slots.slot_table(self.name, spec, self.manager.settings.max_capacity)
        self.publish(slots.instance_health(self.name, self.slots, self.manager.node))

    def withdraw(self) -> None:
        """Offer nothing: every slot Unhealthy (kubelet keeps the pods it already runs)."""
        self.publish(
            [(naming.slot_id(self.name, i), slots.UNHEALTHY) for i in range(len(self.slots))]
        )

    async def allocate(self, device_ids: list[str]) -> Any:
        named = self.manager.named((self.namespace, self.configuration), self.name)
        if named is None:
            raise slots.SlotUnavailable(f"{self.name} is not currently discovered on this node")
        node = self.manager.node

        max_capacity = self.manager.settings.max_capacity

        def claim(current: dict[str, Any]) -> dict[str, str]:
            spec = instances.spec_of(current)
            slots.slot_table(self.name, spec, max_capacity)  # InvalidUsage names the field
            return slots.claim_instance_slots(
                instances.usage_of(current),
                self.name,
                slots.capacity_of(spec, max_capacity),
                device_ids,
                node,
            )

        await self.manager.write_usage(self.namespace, self.name, claim)
        allocation = cdi.allocation(named.device, named.broker_properties)
        logger.info("%s: allocated %s to a container", self.resource, ", ".join(device_ids))
        return _response([allocation], self.manager.cdi_ready((self.namespace, self.configuration)))


class ConfigurationPlugin(Plugin):
    def __init__(self, manager: Manager, namespace: str, configuration: str):
        super().__init__(manager, configuration)
        self.namespace = namespace
        self.vdevs: dict[str, slots.Vdev] = {}

    def update(self, attached: Mapping[str, Sequence[naming.SlotUsage]]) -> None:
        self.vdevs = slots.assign_vdevs(self.name, self.vdevs, attached, self.manager.node)
        self.publish([(vdev, slots.HEALTHY) for vdev in sorted(self.vdevs)])

    async def allocate(self, device_ids: list[str]) -> Any:
        key = (self.namespace, self.name)
        node = self.manager.node
        allocations = []
        for vdev in device_ids:
            target = self.vdevs.get(vdev)
            if target is None:
                raise slots.SlotUnavailable(f"no virtual device {vdev!r}")
            named = self.manager.named(key, target.instance)
            if named is None:
                raise slots.SlotUnavailable(f"{target.instance} is not currently discovered")

            def claim(
                current: dict[str, Any], instance: str = target.instance, vdev: str = vdev
            ) -> dict[str, str]:
                spec = instances.spec_of(current)
                max_capacity = self.manager.settings.max_capacity
                slots.slot_table(instance, spec, max_capacity)
                usage, _ = slots.claim_configuration_slot(
                    instances.usage_of(current),
                    instance,
                    slots.capacity_of(spec, max_capacity),
                    vdev,
                    node,
                )
                return usage

            await self.manager.write_usage(self.namespace, target.instance, claim)
            allocations.append(cdi.allocation(named.device, named.broker_properties))
        logger.info("%s: allocated %s to a container", self.resource, ", ".join(device_ids))
        return _response(allocations, self.manager.cdi_ready(key))


@dataclasses.dataclass(frozen=True, slots=True)
class _Named:
    device: discovered.NamedDevice
    broker_properties: Mapping[str, str]


class Manager:
    def __init__(
        self,
        agent_settings: settings.AgentSettings,
        api: kubeapi.KubeApi,
        metrics: Metrics,
        recorder: events.Recorder | None = None,
    ) -> None:
        """``recorder``: where failure Events go (``None``: logged only)."""
        self.settings = agent_settings
        self.node = agent_settings.node_name
        self.directory = agent_settings.device_plugins_dir
        self.api = api
        self.metrics = metrics
        self._configs: dict[Key, _ConfigDevices] = {}
        self._cdi: dict[Key, bool] = {}
        self._objects: dict[Key, dict[str, Any]] = {}
        self.instance_plugins: dict[Key, InstancePlugin] = {}
        self.configuration_plugins: dict[Key, ConfigurationPlugin] = {}
        self._dirty = asyncio.Event()
        self._socket = kubelet.SocketWatch(self.directory)
        self._missing_logged = False
        self.recorder = recorder
        self._events: asyncio.Queue[tuple[dict[str, Any], str, str]] = asyncio.Queue(_EVENT_QUEUE)

    # -- inputs (synchronous, from the reconciler and the Instance reflector)

    def set_devices(
        self,
        key: Key,
        named: Mapping[str, discovered.NamedDevice],
        broker_properties: Mapping[str, str],
        cdi_ready: bool = False,
    ) -> None:
        self._configs[key] = _ConfigDevices(dict(named), dict(broker_properties))
        self._cdi[key] = cdi_ready
        self._dirty.set()

    def forget_configuration(self, key: Key) -> None:
        self._configs.pop(key, None)
        self._cdi.pop(key, None)
        self._dirty.set()

    def on_instance_event(self, kind: str, obj: dict[str, Any]) -> None:
        key = kubeapi.key_of(obj)
        if kind == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
        self._dirty.set()

    # -- lookups for the plugins

    def named(self, key: Key, instance: str) -> _Named | None:
        config = self._configs.get(key)
        device = None if config is None else config.named.get(instance)
        if config is None or device is None:
            return None
        return _Named(device, config.broker_properties)

    def lost_kubelet(self, plugin: Plugin) -> None:
        """kubelet closed a plugin's ListAndWatch: register it again (on a fresh socket if
        kubelet wiped the old one) at the next tick."""
        plugin.registered = False
        plugin.retry_at = 0.0
        self._dirty.set()

    def cdi_ready(self, key: Key) -> bool:
        return self._cdi.get(key, False)

    async def write_usage(self, namespace: str, instance: str, compute: Any) -> None:
        written = await instances.write(
            self.api,
            namespace,
            instance,
            instances.set_usage(compute),
            attempts=self.settings.timings.write_attempts,
        )
        if written is not None:
            # Reflect our own write at once (the watch event follows with the same content).
            # Only marked dirty: converging here too would race ``run``'s loop, which alone
            # starts and stops plugins.
            self.on_instance_event("MODIFIED", written)

    # -- convergence

    def _wanted(self) -> dict[Key, tuple[str, dict[str, Any]]]:
        wanted = {}
        for key, obj in self._objects.items():
            configuration = instances.spec_of(obj).get("configurationName")
            if not isinstance(configuration, str):
                continue
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if self.node not in instances.nodes_of(obj):
                continue
            if self.named((key[0], configuration), key[1]) is None:
                continue
            wanted[key] = (configuration, obj)
        return wanted

    async def _sync(self) -> None:
        wanted = self._wanted()
        for key in [k for k in self.instance_plugins if k not in wanted]:
            await self.instance_plugins.pop(key).stop()
            self.metrics.forget_instance(key[1])
        attached: dict[Key, dict[str, tuple[naming.SlotUsage, ...]]] = {}
        for key, (configuration, obj) in sorted(wanted.items()):
            plugin = self.instance_plugins.get(key)
            if plugin is None:
                plugin = InstancePlugin(self, key[0], key[1], configuration)
                in_service = self._read_instance(plugin, obj)
                # Kept even when it cannot be served: the kubelet tick retries it.
                self.instance_plugins[key] = plugin
                await self._serve(plugin)
            else:
                in_service = self._read_instance(plugin, obj)
            used = sum(1 for s in plugin.slots if s is not None)
            self.metrics.set_slots(key[1], used, len(plugin.slots))
            if in_service:
                attached.setdefault((key[0], configuration), {})[key[1]] = plugin.slots
        for (namespace, _), (configuration, _) in wanted.items():
            # Out of service Instances still keep their Configuration plugin (with no vdev).
            attached.setdefault((namespace, configuration), {})
        for key in [k for k in self.configuration_plugins if k not in attached]:
            await self.configuration_plugins.pop(key).stop()
        for key, members in sorted(attached.items()):
            config_plugin = self.configuration_plugins.get(key)
            if config_plugin is None:
                config_plugin = ConfigurationPlugin(self, key[0], key[1])
                config_plugin.update(members)
                self.configuration_plugins[key] = config_plugin
                await self._serve(config_plugin)
            else:
                config_plugin.update(members)

    def _read_instance(self, plugin: InstancePlugin, obj: Mapping[str, Any]) -> bool:
        """Update ``plugin`` from its Instance; False while the Instance is out of service.

        Any error is this Instance's alone (see the module docstring): it is never raised.
        """
        version = kubeapi.resource_version_of(obj)
        current = plugin.out_of_service
        if (
            current is not None
            and current.resource_version == version
            and time.monotonic() < current.retry_at
        ):
            return False
        try:
            plugin.update(obj)
        except slots.InvalidUsage as e:
            self._out_of_service(plugin, version, INVALID_INSTANCE, f"{plugin.name}: {e}")
            return False
        except Exception as e:
            # Not foreseen: still this Instance only, but with the traceback to fix it.
            logger.debug("updating %s failed", plugin.resource, exc_info=True)
            self._out_of_service(
                plugin, version, INVALID_INSTANCE, f"{plugin.name}: {type(e).__name__}: {e}"
            )
            return False
        if current is not None:
            plugin.out_of_service = None
            logger.info("Instance %s/%s is in service again", plugin.namespace, plugin.name)
            target = self._objects.get((plugin.namespace, plugin.name))
            if self.recorder is not None and target is not None:
                self.recorder.clear(target, current.reason)
        return True

    def _out_of_service(
        self, plugin: InstancePlugin, version: str, reason: str, message: str
    ) -> None:
        timings = self.settings.timings
        previous = plugin.out_of_service
        backoff = min(
            (previous.backoff if previous else timings.backoff_initial) * 2, timings.backoff_cap
        )
        plugin.out_of_service = _OutOfService(
            reason, message, version, backoff, time.monotonic() + backoff
        )
        plugin.withdraw()
        if previous is not None and (previous.reason, previous.message) == (reason, message):
            logger.debug("%s (again; next read in %.1fs)", message, backoff)
            return
        logger.warning(
            "Instance %s/%s is out of service: %s; other Instances carry on",
            plugin.namespace,
            plugin.name,
            message,
        )
        target = self._objects.get((plugin.namespace, plugin.name))
        if target is not None:
            self._post(target, reason, message)

    def _post(self, target: dict[str, Any], reason: str, message: str) -> None:
        if self.recorder is None:
            return
        try:
            self._events.put_nowait((target, reason, message))
        except asyncio.QueueFull:
            logger.debug("event queue full; not posting %s", reason)

    def _say_socket_missing(self) -> None:
        """Once per absence: plugins wait for kubelet, and the operator must know why (a wrong
        ``--device-plugins-dir``, kubelet not running, the hostPath not mounted)."""
        if self._missing_logged:
            return
        self._missing_logged = True
        waiting = sum(1 for p in self._all() if not p.registered)
        logger.warning(
            "kubelet's device-plugin socket %s is missing: %d device plugins wait for it "
            "(is kubelet running, and is --device-plugins-dir its <root-dir>/device-plugins?)",
            self.directory / kubelet.KUBELET_SOCKET,
            waiting,
        )

    @property
    def kubelet_socket_present(self) -> bool:
        return self._socket.present

    def _all(self) -> list[Plugin]:
        return [*self.instance_plugins.values(), *self.configuration_plugins.values()]

    async def _serve(self, plugin: Plugin) -> None:
        """Start ``plugin`` and register it with kubelet; failures are contained."""
        try:
            await plugin.start(self.directory)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # PluginStartFailed, or anything grpc raises that we did not foresee: either way
            # this plugin only, never the manager (its death would end the agent).
            self._failed(plugin, START_FAILED, str(e))
            return
        if plugin.failure is not None and plugin.failure[0] == START_FAILED:
            self._recovered(plugin)
        await self._try_register(plugin)

    async def _try_register(self, plugin: Plugin) -> None:
        if not self._socket.present or plugin.server is None:
            return
        try:
            await plugin.register(self.directory)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._failed(plugin, REGISTRATION_FAILED, str(e))
            return
        if plugin.failure is not None:
            self._recovered(plugin)

    def _failed(self, plugin: Plugin, reason: str, message: str) -> None:
        timings = self.settings.timings
        # The reconciler's back-off: seed doubled, capped.
        plugin.backoff = min((plugin.backoff or timings.backoff_initial) * 2, timings.backoff_cap)
        plugin.retry_at = time.monotonic() + plugin.backoff
        if plugin.failure == (reason, message):
            logger.debug("%s (again; next attempt in %.1fs)", message, plugin.backoff)
            return
        plugin.failure = (reason, message)
        logger.warning(
            "%s; other plugins carry on, retrying with back-off (first in %.1fs)",
            message,
            plugin.backoff,
        )
        target = self._event_target(plugin)
        if target is not None:
            self._post(target, reason, message)

    def _recovered(self, plugin: Plugin) -> None:
        assert plugin.failure is not None
        reason, _ = plugin.failure
        logger.info("device plugin %s works again", plugin.resource)
        plugin.failure = None
        plugin.backoff = None
        target = self._event_target(plugin)
        if self.recorder is not None and target is not None:
            # Let the same failure be reported again should it come back.
            self.recorder.clear(target, reason)

    def _event_target(self, plugin: Plugin) -> dict[str, Any] | None:
        """The Instance of an Instance plugin; the Configuration (as named by its Instances'
        owner reference) of a Configuration plugin."""
        if isinstance(plugin, InstancePlugin):
            return self._objects.get((plugin.namespace, plugin.name))
        assert isinstance(plugin, ConfigurationPlugin)
        for (namespace, _), obj in sorted(self._objects.items()):
            if namespace != plugin.namespace:
                continue
            if instances.spec_of(obj).get("configurationName") != plugin.name:
                continue
            for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
                if isinstance(owner, dict) and owner.get("kind") == "Configuration":
                    return {
                        "apiVersion": owner.get("apiVersion", naming.API_GROUP_VERSION),
                        "kind": "Configuration",
                        "metadata": {
                            "name": owner.get("name", plugin.name),
                            "namespace": namespace,
                            "uid": owner.get("uid", ""),
                        },
                    }
            return obj
        return None

    async def _post_events(self) -> None:
        assert self.recorder is not None
        while True:
            target, reason, message = await self._events.get()
            try:
                await self.recorder.post(target, "Warning", reason, message)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Best effort (events.Recorder already swallows API errors): never lose the task.
                logger.debug("posting event %s failed", reason, exc_info=True)

    async def _kubelet_tick(self) -> None:
        if self._socket.changed():
            self._missing_logged = False
            logger.info("kubelet socket (re)appeared; restarting and re-registering plugins")
            for plugin in self._all():
                await plugin.stop()
                # kubelet restarting is when an operator's fix takes effect: retry at once.
                plugin.retry_at, plugin.backoff = 0.0, None
                await self._serve(plugin)
            return
        now = time.monotonic()
        for plugin in self._all():
            if plugin.registered or now < plugin.retry_at:
                continue
            if plugin.server is None:
                await self._serve(plugin)
                continue
            if not self._socket.present:
                self._say_socket_missing()
                continue
            if not await asyncio.to_thread(_exists, plugin.socket):
                # kubelet wiped its directory: serve on a fresh socket before registering.
                await plugin.stop()
                await self._serve(plugin)
                continue
            await self._try_register(plugin)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                if self.recorder is not None:
                    tg.create_task(self._post_events(), name="device plugin events")
                await self._converge()
        finally:
            await stop_all(self._all())
            self.instance_plugins.clear()
            self.configuration_plugins.clear()

    async def _converge(self) -> None:
        poll = self.settings.timings.kubelet_poll
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await self._dirty.wait()
            self._dirty.clear()
            await self._kubelet_tick()
            await self._sync()

    def failed_plugins(self) -> dict[str, str]:
        """Resource name -> the error of every plugin that is not working right now
        (including Instances out of service)."""
        failed = {p.resource: p.failure[1] for p in self._all() if p.failure is not None}
        for plugin in self.instance_plugins.values():
            if plugin.out_of_service is not None:
                failed.setdefault(plugin.resource, plugin.out_of_service.message)
        return failed

    # -- for the slot reclaimer

    def held_slots(self) -> dict[str, tuple[naming.SlotUsage, ...]]:
        """Slots of the Instances in service (one we cannot read is left alone)."""
        return {
            key[1]: plugin.slots
            for key, plugin in self.instance_plugins.items()
            if plugin.out_of_service is None
        }

    def namespace_of(self, instance: str) -> str | None:
        for key in self.instance_plugins:
            if key[1] == instance:
                return key[0]
        return None


async def stop_all(running: Sequence[Plugin]) -> None:
    """Stop every plugin even while being cancelled; re-raise the cancellation at the end."""
    cancelled = False
    for plugin in running:
        try:
            await plugin.stop()
        except asyncio.CancelledError:
            cancelled = True
        except Exception:
            logger.exception("stopping device plugin %s failed", plugin.resource)
    if cancelled:
        raise asyncio.CancelledError


def _exists(path: Path | None) -> bool:
    return path is not None and path.exists()
