"""Configuration reconcile: discovered devices -> Instances, CDI spec, plugin inputs.

``plan`` is the pure decision (reference §4): which Instances this node
joins (creates or adds itself to) and which it leaves (removes itself from,
the last node deleting). ``Reconciler`` carries it out per Configuration key,
one worker per key at a time (``kubecontrol.controlling.Controller``):

1. Configuration gone → stop discovery, leave its Instances, drop its CDI spec
   and plugins. Being deleted → the same, then remove this node's finalizer.
2. Ensure this node's finalizer (the node name, as Akri) with an RV-guarded PUT.
3. Ensure the discovery request (``discovering.Requests``; a changed handler,
   details or property list restarts it — Akri kept the old request). A
   missing handler is not an error: the request attaches when it registers.
4. Resolve properties once here too, so an unsolvable ConfigMap/Secret
   reference fails the reconcile (Event + back-off) instead of failing silently
   inside the stream.
5. Join every discovered device's Instance; leave Instances of vanished
   devices only when the request is trusted (``discovering.trusted``). An
   Instance of this Configuration that holds this node's finalizer while this
   node does not serve it (Terminating, or the node not in ``nodes``: left so by
   Akri's agent, a crash, or a controller) loses it whatever the trust, so it is
   never stuck Terminating (``instances.stale_finalizer``).
6. Write the CDI spec (without the values of Secret-sourced properties: the file
   is world-readable); hand the named devices to the plugin manager. Devices the
   registry did not admit are named in a ``DevicesRejected`` Warning Event.
7. Success: requeue after ``requeue``; failure: back-off from 1 s doubling,
   capped (Akri's was uncapped).

Instances that already hold the desired content are not written (the
reflector's copy is compared first), so steady state costs no API writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from discovery import registry
from discovery.agent import cdi, discovered, discovering, instances, properties, resources, settings
from kubecontrol import controlling, events, kubeapi, watching

logger = logging.getLogger(__name__)

Key = tuple[str, str]

DEVICES_REJECTED = "DevicesRejected"
"""Event reason: a handler reported devices the agent does not admit (``discovery.admission``)."""


class PluginSink(Protocol):
    """What the reconciler tells the device-plugin manager."""

    def set_devices(
        self,
        key: Key,
        named: Mapping[str, discovered.NamedDevice],
        broker_properties: Mapping[str, str],
        cdi_ready: bool = False,
    ) -> None: ...

    def forget_configuration(self, key: Key) -> None: ...


class Metrics(Protocol):
    def set_instances(self, key: Key, shared: int, local: int) -> None: ...

    def forget_configuration(self, key: Key) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    join: tuple[instances.DesiredInstance, ...]
    leave: tuple[str, ...]


def belongs_to(instance: Mapping[str, Any], namespace: str, configuration: str) -> bool:
    meta = instance.get("metadata") or {}
    return (
        meta.get("namespace") == namespace
        and instances.spec_of(instance).get("configurationName") == configuration
    )


def capacity_of(spec: Mapping[str, Any]) -> int:
    capacity = spec.get("capacity", 1)
    return capacity if isinstance(capacity, int) and not isinstance(capacity, bool) else 1


def broker_properties_of(spec: Mapping[str, Any]) -> dict[str, str]:
    props = spec.get("brokerProperties") or {}
    return {str(k): str(v) for k, v in props.items()} if isinstance(props, dict) else {}


def plan(
    configuration: Mapping[str, Any],
    named: Mapping[str, discovered.NamedDevice],
    trusted: bool,
    existing: Iterable[Mapping[str, Any]],
    node: str,
) -> Plan:
    meta = configuration.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    spec = configuration.get("spec") or {}
    capacity = capacity_of(spec)
    config_props = broker_properties_of(spec)
    owner = instances.owner_reference(configuration)
    current = {
        str((i.get("metadata") or {}).get("name")): i
        for i in existing
        if belongs_to(i, namespace, name)
    }
    join = []
    for instance_name, device in sorted(named.items()):
        desired = instances.DesiredInstance(
            name=instance_name,
            namespace=namespace,
            configuration=name,
            cdi_name=device.cdi_name,
            capacity=capacity,
            broker_properties={**device.device.properties, **config_props},
            shared=device.shared,
            owner=owner,
        )
        if not isinstance(
            instances.join(desired, node)(_copy(current.get(instance_name))), instances.NoChange
        ):
            join.append(desired)
    leave = tuple(
        sorted(
            n
            for n, obj in current.items()
            if n not in named
            and (
                (trusted and node in instances.nodes_of(obj))
                or instances.stale_finalizer(obj, node)
            )
        )
    )
    return Plan(tuple(join), leave)


def _copy(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if obj is None else dict(obj)


class Reconciler:
    def __init__(
        self,
        agent_settings: settings.AgentSettings,
        api: kubeapi.KubeApi,
        reg: registry.Registry,
        plugins: PluginSink,
        metrics: Metrics,
        recorder: events.Recorder,
        on_instance_event: watching.Handler | None = None,
    ) -> None:
        self.settings = agent_settings
        self.node = agent_settings.node_name
        self.api = api
        self.registry = reg
        self.plugins = plugins
        self.metrics = metrics
        self.recorder = recorder
        timings = agent_settings.timings
        self.controller = controlling.Controller(
            "configurations",
            self.reconcile,
            controlling.Timings(
                workers=agent_settings.workers,
                # Akri's seed is doubled before the first retry: 1 s with the default 0.5 s.
                backoff_initial=min(2 * timings.backoff_initial, timings.backoff_cap),
                backoff_cap=timings.backoff_cap,
                watch_timeout=agent_settings.kube.watch_timeout,
                watch_backoff_initial=timings.watch_backoff_initial,
                watch_backoff_cap=timings.watch_backoff_cap,
            ),
            on_error=self._report_failure,
        )
        self.queue = self.controller.queue
        self.configurations = self.controller.watch(
            api,
            resources.CONFIGURATIONS,
            self._on_configuration,
            absent_hint=resources.CRDS_MISSING,
        )
        self._on_instance_event = on_instance_event
        self.instances = self.controller.watch(
            api,
            resources.INSTANCES,
            self._on_instance,
            primary=False,
            absent_hint=resources.CRDS_MISSING,
        )
        self.requests: discovering.Requests | None = None

    # -- triggers

    def _on_configuration(self, kind: str, obj: dict[str, Any]) -> None:
        self.queue.add(kubeapi.key_of(obj))

    def _on_instance(self, kind: str, obj: dict[str, Any]) -> None:
        if self._on_instance_event is not None:
            self._on_instance_event(kind, obj)
        # Someone else deleted or edited an Instance of ours: converge it again.
        namespace, _ = kubeapi.key_of(obj)
        configuration = instances.spec_of(obj).get("configurationName")
        if not isinstance(configuration, str):
            return
        key = (namespace, configuration)
        affected = kind == "DELETED" or self.node not in instances.nodes_of(obj)
        if instances.stale_finalizer(obj, self.node) and kind != "DELETED":
            # Even for a Configuration that is gone: only this node can let it go.
            self.queue.add(key)
        elif affected and key in self.configurations.store:
            self.queue.add(key)

    def _on_request_change(self, key: Key) -> None:
        self.queue.add(key)

    def handler_registered(self, name: str) -> None:
        """Re-trigger every Configuration that uses ``name`` (it may be waiting for it)."""
        for key, obj in self.configurations.store.items():
            if discovering.RequestSpec.of(obj.get("spec") or {}).handler == name:
                self.queue.add(key)

    # -- running

    async def run(
        self,
        tg: asyncio.TaskGroup,
        on_snapshot: Callable[[Key, str, registry.Snapshot, float], None] | None = None,
    ) -> None:
        """Start the reflectors and workers in ``tg``; returns once both caches are synced."""
        timings = self.settings.timings
        # Without a registration socket every endpoint is embedded and already registered.
        window = timings.registration_window if self.settings.discovery_handlers_dir else 0.0
        self.requests = discovering.Requests(
            self.registry,
            self.api,
            tg,
            self._on_request_change,
            timings=discovering.TrustTimings(
                settle=timings.settle,
                degraded_grace=timings.degraded_grace,
                registrations_until=time.monotonic() + window,
            ),
            on_snapshot=on_snapshot,
        )
        tg.create_task(self.controller.run_caches(), name="watch configurations and instances")
        tg.create_task(self._follow_registrations(), name="follow handler registrations")
        await self.controller.wait_synced()
        tg.create_task(self.controller.run_workers(), name="reconcile configurations")

    async def _follow_registrations(self) -> None:
        async for name in self.registry.registrations():
            self.handler_registered(name)

    async def _report_failure(self, key: Key, error: Exception) -> None:
        obj = self.configurations.store.get(key)
        if obj is not None:
            await self.recorder.post(obj, "Warning", "ReconcileFailed", str(error))

    # -- one reconcile

    async def reconcile(self, key: Key) -> float | None:
        """Returns when to reconcile ``key`` again (None: only on events)."""
        assert self.requests is not None
        configuration = self.configurations.store.get(key)
        if configuration is None:
            await self._release(key)
            return None
        meta = configuration.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            await self._release(key)
            await self._set_finalizer(key, present=False)
            return None
        await self._set_finalizer(key, present=True)

        spec = configuration.get("spec") or {}
        capacity = capacity_of(spec)
        if not 0 <= capacity <= self.settings.max_capacity:
            raise ValueError(f"capacity {capacity} is outside 0..{self.settings.max_capacity}")
        request_spec = discovering.RequestSpec.of(spec)
        if not request_spec.handler:
            raise ValueError("spec.discoveryHandler.name is empty")
        try:
            resolved = await properties.resolve(request_spec.properties, self.api)
        except (properties.UnsolvableProperty, properties.InvalidProperty) as e:
            await self.requests.stop(key)
            raise ValueError(f"discovery properties: {e}") from e
        secret_names = properties.secret_names(request_spec.properties)
        withheld = cdi.secret_texts(v for n, v in resolved.items() if n in secret_names and v)
        self.requests.ensure(key, request_spec)
        if not self.requests.is_registered(request_spec.handler):
            await self.recorder.post(
                configuration,
                "Normal",
                "WaitingForHandler",
                f"no discovery handler named {request_spec.handler!r} is registered yet",
            )
        else:
            self.recorder.clear(configuration, "WaitingForHandler")
        view = self.requests.view(key)
        assert view is not None
        if view.invalid_details is not None:
            await self.recorder.post(
                configuration, "Warning", "InvalidDiscoveryDetails", view.invalid_details
            )
        if view.rejected:
            # Devices a handler reported that the agent does not admit (host root mounts,
            # device nodes outside /dev, ...): the user must hear why they have no Instance.
            await self.recorder.post(
                configuration, "Warning", DEVICES_REJECTED, "; ".join(view.rejected)
            )
        else:
            self.recorder.clear(configuration, DEVICES_REJECTED)

        named = discovered.name_devices(key[1], view.devices, self.node)
        decided = plan(configuration, named, view.trusted, self.instances.store.values(), self.node)
        attempts = self.settings.timings.write_attempts
        for desired in decided.join:
            await instances.write(
                self.api,
                desired.namespace,
                desired.name,
                instances.join(desired, self.node),
                attempts=attempts,
            )
        for name in decided.leave:
            await instances.write(
                self.api, key[0], name, instances.leave(self.node), attempts=attempts
            )
        broker_properties = broker_properties_of(spec)
        cdi_ready = await self._write_cdi(key, named, broker_properties, withheld)
        self.plugins.set_devices(key, named, broker_properties, cdi_ready)
        shared = sum(1 for d in named.values() if d.shared)
        self.metrics.set_instances(key, shared, len(named) - shared)

        again = self.settings.timings.requeue
        if view.recheck_in is not None:
            again = min(again, view.recheck_in + 0.05)
        return again

    async def _release(self, key: Key) -> None:
        """This node stops serving ``key``: discovery, Instances, CDI, plugins."""
        assert self.requests is not None
        await self.requests.stop(key)
        for obj in list(self.instances.store.values()):
            if belongs_to(obj, *key) and (
                self.node in instances.nodes_of(obj) or self.node in instances.finalizers_of(obj)
            ):
                name = str((obj.get("metadata") or {}).get("name"))
                await instances.write(
                    self.api,
                    key[0],
                    name,
                    instances.leave(self.node),
                    attempts=self.settings.timings.write_attempts,
                )
        await self._remove_cdi(key)
        self.plugins.forget_configuration(key)
        self.metrics.forget_configuration(key)
        self.controller.backoff.forget(key)

    async def _set_finalizer(self, key: Key, *, present: bool) -> None:
        cached = self.configurations.store.get(key)
        if cached is not None and (self.node in _finalizers(cached)) == present:
            return
        for _ in range(self.settings.timings.write_attempts):
            current = await self.api.get_or_none(resources.CONFIGURATIONS, *key)
            if current is None:
                return
            finalizers = _finalizers(current)
            if (self.node in finalizers) == present:
                return
            finalizers = (
                [*finalizers, self.node] if present else [f for f in finalizers if f != self.node]
            )
            current.setdefault("metadata", {})["finalizers"] = finalizers
            try:
                await self.api.replace(resources.CONFIGURATIONS, key[0], key[1], current)
                return
            except (kubeapi.Conflict, kubeapi.NotFound):
                continue
        raise instances.WriteFailed(f"finalizer on {key[0]}/{key[1]}: too many conflicts")

    def _cdi_path(self, key: Key) -> Path | None:
        if self.settings.cdi_dir is None:
            return None
        return cdi.spec_path(self.settings.cdi_dir, key[1])

    async def _write_cdi(
        self,
        key: Key,
        named: Mapping[str, discovered.NamedDevice],
        broker: Mapping[str, str],
        withheld: tuple[str, ...] = (),
    ) -> bool:
        """Write (or remove) the CDI spec; True when a spec file now holds these devices."""
        path = self._cdi_path(key)
        if path is None:
            return False
        spec = cdi.build_spec(key[1], named.values(), broker, withheld)
        if spec is None:
            if named and not cdi.valid_kind(key[1]):
                logger.warning(
                    "Configuration name %r is not a valid CDI class; no CDI spec is written",
                    key[1],
                )
            await self._remove_cdi(key)
            return False
        await cdi.write_spec(path, spec)
        return True

    async def _remove_cdi(self, key: Key) -> None:
        path = self._cdi_path(key)
        if path is not None:
            await cdi.remove_spec(path)


def _finalizers(obj: Mapping[str, Any]) -> list[str]:
    value = (obj.get("metadata") or {}).get("finalizers") or []
    return [f for f in value if isinstance(f, str)]
