"""The broker controller (Akri's controller): carries out ``brokerplanning.plan`` per
Configuration.

Keys are Configurations (``namespace``, ``name``). Every object that matters to one queues
its key: the Configuration itself, its Instances (``spec.configurationName``), and the Pods,
Jobs and Services labelled ``akri.sh/configuration=<name>`` (broker Pods, Jobs and both kinds
of Service carry it). A reconcile reads them all from the reflectors' stores, plans, and
carries the actions out in order (deletes first), every one of them even when an earlier one
failed, then:

* a broker that cannot be built (``SpecError``) or a write the apiserver refuses (400/403/
  422: the broker spec is not valid for it, a quota, a policy) is a Warning Event on the
  Configuration (``InvalidBroker``, ``FailedCreate``, ``FailedUpdate``) carrying the
  apiserver's reason, one log line, and a failed reconcile: the key backs off (capped), the
  other Configurations are not held up;
* a name taken by an object that is not ours is a ``NameTaken`` Warning Event; that object is
  never touched;
* a broker pod that ended is recreated only after a per-pod back-off (``restart_backoff``,
  reset once the pod runs), so a broker kubelet keeps refusing does not become a storm;
* successful writes are Normal Events (``SuccessfulCreate``, ``SuccessfulDelete``,
  ``SuccessfulUpdate``) on the Configuration and an info line.

A Service update the apiserver refuses (e.g. an immutable field changed) is answered by
deleting the Service; the next pass creates it anew. Jobs are deleted with Background
propagation, so their pods go too.

RBAC: configurations/instances get/list/watch; pods, batch jobs: get/list/watch/create/delete;
services: also update; events create; instances/finalizers and configurations/finalizers
update (``blockOwnerDeletion`` under the OwnerReferencesPermissionEnforcement admission
plugin).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from discovery.agent import resources
from kubecontrol import backoff, controlling, events, kubeapi, watching
from managers import brokerobjects as objects
from managers import brokerplanning, context, metrics

logger = logging.getLogger(__name__)

NAME = "brokers"
CONFLICT_REQUEUE = 1.0
"""Seconds before a Configuration whose write lost a race is planned again."""

RESOURCES: Mapping[str, kubeapi.Resource] = {
    "pods": kubeapi.PODS,
    "jobs": kubeapi.JOBS,
    "services": kubeapi.SERVICES,
}
_SINGULAR = {"pods": "pod", "jobs": "job", "services": "service"}

Key = controlling.Key


class BrokersFailed(Exception):
    """Some of a Configuration's broker writes failed; the key backs off."""


def _describe(e: kubeapi.KubeError) -> str:
    return e.detail or str(e)


class Brokers:
    def __init__(self, ctx: context.Context) -> None:
        self.api = ctx.api
        self.recorder: events.Recorder = ctx.recorder
        self.metrics: metrics.Metrics = ctx.metrics
        own = ctx.settings.brokers
        self.restarts: backoff.PerKey[tuple[str, str]] = backoff.PerKey(
            own.restart_backoff_initial, own.restart_backoff_cap
        )
        # (namespace, configuration) -> pod name -> wall-clock time before which the pod
        # is not created again; pruned to the pods that Configuration still wants.
        self.holds: dict[Key, dict[str, float]] = {}
        self.controller = controlling.Controller(
            NAME, self.reconcile, own.timings, observer=ctx.metrics, informers=ctx.informers
        )
        watch = self.controller.watch
        hint = resources.CRDS_MISSING
        self.configurations = watch(ctx.api, resources.CONFIGURATIONS, absent_hint=hint)
        self.instances = watch(
            ctx.api,
            resources.INSTANCES,
            self._queue_configuration_of,
            primary=False,
            absent_hint=hint,
        )
        self.pods = self._labelled(ctx.api, kubeapi.PODS)
        self.jobs = self._labelled(ctx.api, kubeapi.JOBS)
        self.services = self._labelled(ctx.api, kubeapi.SERVICES)

    def _labelled(self, api: kubeapi.KubeApi, resource: kubeapi.Resource) -> watching.Reflector:
        return self.controller.watch(
            api,
            resource,
            self._queue_labelled,
            primary=False,
            label_selector=objects.CONFIGURATION_LABEL,
        )

    # --- events -> keys

    def _queue_configuration_of(self, kind: str, instance: dict[str, Any]) -> None:
        name = objects.spec(instance).get("configurationName")
        if isinstance(name, str) and name:
            self.controller.enqueue((objects.namespace_of(instance), name))

    def _queue_labelled(self, kind: str, obj: dict[str, Any]) -> None:
        name = objects.labels_of(obj).get(objects.CONFIGURATION_LABEL)
        if name:
            self.controller.enqueue((objects.namespace_of(obj), name))

    # --- reconcile

    def _world(self, key: Key) -> brokerplanning.World:
        namespace, name = key

        def labelled(reflector: watching.Reflector) -> list[dict[str, Any]]:
            return [
                obj
                for (ns, _), obj in reflector.store.items()
                if ns == namespace
                and objects.labels_of(obj).get(objects.CONFIGURATION_LABEL) == name
            ]

        instances = [
            i
            for (ns, _), i in self.instances.store.items()
            if ns == namespace and objects.spec(i).get("configurationName") == name
        ]
        return brokerplanning.World(
            configuration=self.configurations.store.get(key),
            instances=instances,
            pods=labelled(self.pods),
            jobs=labelled(self.jobs),
            services=labelled(self.services),
            now=time.time(),
            hold=dict(self.holds.get(key, {})),
        )

    async def reconcile(self, key: Key) -> float | None:
        world = self._world(key)
        plan = brokerplanning.plan(world)
        self._settle_holds(key, plan)
        configuration = world.configuration
        failures: list[str] = []
        for problem in plan.problems:
            where = f"Instance {problem.instance}: " if problem.instance else ""
            message = f"{where}cannot build its broker: {problem.error}"
            failures.append(message)
            logger.warning("Configuration %s: %s", controlling.format_key(key), message)
            await self._event(configuration, "Warning", "InvalidBroker", message)
        again: float | None = plan.requeue_after
        for action in plan.actions:
            try:
                outcome = await self._carry_out(key, configuration, action)
            except kubeapi.Unavailable as e:
                failures.append(str(e))
                continue
            if outcome is not None:
                failures.append(outcome)
            elif isinstance(action, brokerplanning.Delete) and action.ended:
                self._hold(key, action.name)
        if failures:
            raise BrokersFailed(
                f"{len(failures)} problem(s), first: {failures[0]}"
                if len(failures) > 1
                else failures[0]
            )
        return again

    def _settle_holds(self, key: Key, plan: brokerplanning.Plan) -> None:
        namespace = key[0]
        for name in plan.running:
            self.restarts.succeeded((namespace, name))
        holds = self.holds.get(key)
        if holds is None:
            return
        for name in list(holds):
            if name in plan.running or name not in plan.wanted_pods:
                del holds[name]
                if name not in plan.wanted_pods:
                    self.restarts.forget((namespace, name))
        if not holds:
            del self.holds[key]

    def _hold(self, key: Key, pod: str) -> None:
        delay = self.restarts.failed((key[0], pod))
        self.holds.setdefault(key, {})[pod] = time.time() + delay
        logger.info("broker pod %s/%s ended; a new one in %.1fs", key[0], pod, delay)

    async def _carry_out(
        self, key: Key, configuration: Mapping[str, Any] | None, action: brokerplanning.Action
    ) -> str | None:
        """Do one action; returns a failure message (after an Event) or None."""
        resource = RESOURCES[action.kind]
        what = _SINGULAR[action.kind]
        if isinstance(action, brokerplanning.Delete):
            return await self._delete(configuration, action, resource, what)
        body = action.body
        name = objects.name_of(body)
        namespace = objects.namespace_of(body)
        verb = "create" if isinstance(action, brokerplanning.Create) else "update"
        try:
            if isinstance(action, brokerplanning.Create):
                await self.api.create(resource, namespace, body)
            else:
                await self.api.replace(resource, namespace, name, body)
        except kubeapi.Conflict as e:
            if verb == "update":
                self._count(action.kind, verb, "conflict")
                raise kubeapi.Unavailable(f"{what} {name} changed meanwhile") from e
            return await self._name_taken(configuration, resource, what, namespace, name)
        except kubeapi.NotFound as e:
            self._count(action.kind, verb, "error")
            raise kubeapi.Unavailable(f"{what} {namespace}/{name}: {e}") from e
        except kubeapi.KubeError as e:
            if isinstance(e, kubeapi.Unavailable):
                self._count(action.kind, verb, "error")
                raise
            self._count(action.kind, verb, "refused")
            message = f"{what} {name} ({action.why}): {_describe(e)}"
            reason = "FailedCreate" if verb == "create" else "FailedUpdate"
            await self._event(configuration, "Warning", reason, message)
            logger.warning(
                "Configuration %s: %s refused: %s", controlling.format_key(key), what, message
            )
            if verb == "update":
                # An immutable field changed, say: start over with a new Service.
                await self._delete(
                    configuration,
                    brokerplanning.Delete(
                        action.kind, namespace, name, objects.uid_of(body), "update refused"
                    ),
                    resource,
                    what,
                )
            return message
        self._count(action.kind, verb, "ok")
        past = "Created" if verb == "create" else "Updated"
        logger.info("%s %s %s/%s (%s)", past.lower(), what, namespace, name, action.why)
        await self._event(
            configuration,
            "Normal",
            f"Successful{verb.capitalize()}",
            f"{past} {what} {name}: {action.why}",
        )
        return None

    async def _delete(
        self,
        configuration: Mapping[str, Any] | None,
        action: brokerplanning.Delete,
        resource: kubeapi.Resource,
        what: str,
    ) -> str | None:
        try:
            await self.api.delete(
                resource,
                action.namespace,
                action.name,
                uid=action.uid or None,
                propagation="Background",
            )
        except (kubeapi.NotFound, kubeapi.Conflict):
            # Gone already, or the name now belongs to another object: nothing of ours left.
            self._count(action.kind, "delete", "gone")
            return None
        except kubeapi.KubeError as e:
            if isinstance(e, kubeapi.Unavailable):
                self._count(action.kind, "delete", "error")
                raise
            self._count(action.kind, "delete", "refused")
            message = f"{what} {action.name} ({action.why}): {_describe(e)}"
            await self._event(configuration, "Warning", "FailedDelete", message)
            return message
        self._count(action.kind, "delete", "ok")
        logger.info("deleted %s %s/%s (%s)", what, action.namespace, action.name, action.why)
        await self._event(
            configuration,
            "Normal",
            "SuccessfulDelete",
            f"Deleted {what} {action.name}: {action.why}",
        )
        return None

    async def _name_taken(
        self,
        configuration: Mapping[str, Any] | None,
        resource: kubeapi.Resource,
        what: str,
        namespace: str,
        name: str,
    ) -> str | None:
        existing = await self.api.get_or_none(resource, namespace, name)
        if existing is not None and objects.controller_of(existing) is not None:
            # Ours; the watch has not brought it yet. The next pass sees it.
            return None
        message = (
            f"{what} {namespace}/{name} exists and is not controlled by an akri.sh Instance "
            "or Configuration: left alone, no broker there until it is removed"
        )
        self._count(resource.plural, "create", "name-taken")
        await self._event(configuration, "Warning", "NameTaken", message)
        return message

    def _count(self, kind: str, verb: str, outcome: str) -> None:
        self.metrics.broker_writes.labels(kind, verb, outcome).inc()

    async def _event(
        self, configuration: Mapping[str, Any] | None, kind: str, reason: str, message: str
    ) -> None:
        if configuration is None:
            return
        # List items of custom resources carry their kind, watch events too; be sure anyway.
        configuration = {
            "apiVersion": objects.API_VERSION,
            "kind": "Configuration",
            **configuration,
        }
        await self.recorder.post(configuration, kind, reason, message)
        if kind == "Warning":
            return
        # A success clears the matching failure, so a recurrence is reported again.
        failure = {"SuccessfulCreate": "FailedCreate", "SuccessfulUpdate": "FailedUpdate"}
        if reason in failure:
            self.recorder.clear(configuration, failure[reason])


def build(ctx: context.Context) -> controlling.Controller:
    return Brokers(ctx).controller
