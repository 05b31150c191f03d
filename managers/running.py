"""Assembling ``edgehub manager``: ``Manager(settings).run()`` until cancelled.

One TaskGroup owns everything: the reflectors (``kubecontrol.informing``: one list+watch per
resource and scope, shared by the controllers that follow it, keeping what ``shapes`` says they
read; always running, so a standby replica keeps warm caches and is ready the moment it is
elected) and, while this replica leads, the controllers' workers. With leader election (the
default) the workers run inside ``kubecontrol.electing.Elector.run``: they start when the
Lease is acquired and are cancelled the moment it is lost; a cancelled ``run`` (SIGTERM) stops
the workers first, then releases the Lease, then closes the health server and the API client,
so a standby takes over within a retry period.

Readiness (``/readyz``): every controller's caches are synced, and this replica leads, or
stands by having read the Lease within the lease duration (it can take over), or runs
without leader election.

Failures before anything runs (unreadable kubeconfig, health port in use, bad election
settings) raise ``StartupError`` with a one-line message; an apiserver that cannot be reached
is not one: the reflectors and the elector retry with capped back-off until it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from kubecontrol import controlling, electing, events, informing, kubeapi, leases
from managers import context, metrics, registry, serving, settings, webhookserving

logger = logging.getLogger(__name__)

COMPONENT = "edgehub-manager"


class StartupError(Exception):
    """The manager could not start (bad settings, unusable kubeconfig, port in use)."""


class Manager:
    def __init__(self, manager_settings: settings.ManagerSettings) -> None:
        self.settings = manager_settings
        self.metrics = metrics.Metrics()
        self.controllers: list[controlling.Controller] = []
        self.elector: electing.Elector | None = None
        self.informers: informing.Informers | None = None
        """The shared reflectors, once ``run`` built the controllers."""
        self.health_port: int | None = None
        self.webhook_port: int | None = None
        self.certificates: webhookserving.Certificates | None = None
        self.started = asyncio.Event()
        """Set once the health port is bound and the controllers are running."""
        self._election = _election_config(manager_settings)

    # -- state

    @property
    def leading(self) -> bool:
        return self.elector.leading if self.elector is not None else self.started.is_set()

    def readiness(self) -> list[serving.Check]:
        waiting = [c.name for c in self.controllers if not c.synced]
        checks: list[serving.Check] = [
            (
                "caches",
                bool(self.controllers) and not waiting,
                f"not synced: {', '.join(waiting)}" if waiting else "",
            )
        ]
        elector = self.elector
        if elector is None:
            checks.append(("leader-election", True, "disabled"))
        elif elector.leading:
            checks.append(("leader-election", True, f"leading as {elector.config.identity}"))
        elif elector.in_contact():
            checks.append(("leader-election", True, f"standby, leader {elector.holder or 'none'}"))
        else:
            checks.append(("leader-election", False, "the Lease has not been read recently"))
        if self.settings.webhook is not None:
            port, certificates = self.webhook_port, self.certificates
            if port is None or certificates is None:
                checks.append(("webhook", False, "not serving"))
            elif certificates.loaded:
                checks.append(("webhook", True, f"port {port}"))
            else:
                # Not a failure: the replica's controllers work; the webhook starts serving
                # when its certificate appears (nothing calls it before it is configured).
                checks.append(("webhook", True, f"port {port}, waiting for its certificate"))
        return checks

    # -- running

    async def run(self) -> None:
        """Run until cancelled; raises ``StartupError`` when it cannot start."""
        s = self.settings
        async with contextlib.AsyncExitStack() as stack:
            try:
                api_client = await kubeapi.connect(
                    None, s.kube.kubeconfig, s.kube.user_agent, s.kube.service_account
                )
            except kubeapi.KubeError as e:
                raise StartupError(str(e)) from e
            stack.push_async_callback(api_client.close)
            api = kubeapi.KubeApi(api_client, s.kube.request_timeout)
            recorder = events.Recorder(api, s.host, component=COMPONENT)
            self.informers = informing.Informers(
                api, informing.Settings(watch_timeout=s.kube.watch_timeout)
            )
            ctx = context.Context(api, s, recorder, self.metrics, self.informers)
            self.controllers = [registry.FACTORIES[name](ctx) for name in s.controllers]
            self.metrics.follow(self.controllers)
            if s.health_port is not None:
                try:
                    runner, self.health_port = await serving.serve(
                        self.metrics, s.bind_address, s.health_port, self.readiness
                    )
                except OSError as e:  # in use, or not an address of this host
                    raise StartupError(
                        f"cannot serve health on {s.bind_address}:{s.health_port}: "
                        f"{e.strerror or e}"
                    ) from e
                stack.push_async_callback(runner.cleanup)
            if s.webhook is not None:
                await self._serve_webhook(api, s.webhook, stack)
            async with asyncio.TaskGroup() as tg:
                if self.certificates is not None and s.webhook is not None:
                    tg.create_task(
                        self.certificates.watch(s.webhook.reload_interval),
                        name="webhook certificates",
                    )
                tg.create_task(self.informers.run(), name="informers")
                for controller in self.controllers:
                    tg.create_task(controller.run_caches(), name=f"{controller.name}: caches")
                if self._election is not None:
                    self.elector = electing.Elector(
                        api, self._election, recorder=recorder, on_change=self.metrics.leading
                    )
                    tg.create_task(self.elector.run(self._lead), name="leader election")
                else:
                    self.metrics.leading(True)
                    tg.create_task(self._lead(), name="controllers")
                logger.info(
                    "edgehub manager running controllers %s (%s)",
                    ", ".join(s.controllers),
                    "leader election on Lease "
                    f"{s.leader_election.namespace}/{s.leader_election.name}"
                    if self._election is not None
                    else "no leader election",
                )
                self.started.set()

    async def _serve_webhook(
        self, api: kubeapi.KubeApi, own: settings.Webhook, stack: contextlib.AsyncExitStack
    ) -> None:
        """Every replica serves the webhook, leader or not (the apiserver may call any)."""
        certificates = webhookserving.Certificates(own.cert_file, own.key_file)
        try:
            await certificates.load()
        except webhookserving.WebhookError as e:
            raise StartupError(str(e)) from e
        validator = webhookserving.Validator(api, own, self.metrics)
        try:
            runner, self.webhook_port = await webhookserving.serve(
                validator, certificates, own.bind_address, own.port
            )
        except OSError as e:
            raise StartupError(
                f"cannot serve the webhook on {own.bind_address}:{own.port}: {e.strerror or e}"
            ) from e
        stack.push_async_callback(runner.cleanup)
        self.certificates = certificates

    async def _lead(self) -> None:
        """Every controller's workers, until cancelled (this replica stopped leading)."""
        async with asyncio.TaskGroup() as tg:
            for controller in self.controllers:
                tg.create_task(controller.run_workers(), name=f"{controller.name}: workers")


def _election_config(s: settings.ManagerSettings) -> leases.Config | None:
    election = s.leader_election
    if not election.enabled:
        return None
    try:
        return leases.Config(
            namespace=election.namespace,
            name=election.name,
            identity=election.identity or electing.default_identity(),
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
        )
    except ValueError as e:
        raise StartupError(f"leader election: {e}") from e


@contextlib.asynccontextmanager
async def running(manager_settings: settings.ManagerSettings) -> AsyncIterator[Manager]:
    """A started manager (health port bound, controllers running) for tests and embedders;
    stopped (workers cancelled, Lease released) on exit. A startup failure is raised here, a
    later crash on exit."""
    manager = Manager(manager_settings)
    failures: list[Exception] = []

    async def guarded() -> None:
        try:
            await manager.run()
        except Exception as e:
            failures.append(e)

    # The TaskGroup is entered through a stack, not ``async with``: an exception from the
    # caller's block then propagates as it is instead of inside an ExceptionGroup.
    stack = contextlib.AsyncExitStack()
    tg = await stack.enter_async_context(asyncio.TaskGroup())
    task = tg.create_task(guarded(), name="edgehub manager")
    started = tg.create_task(manager.started.wait(), name="edgehub manager started")
    try:
        await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        started.cancel()
        if not manager.started.is_set():
            task.cancel()
            await stack.aclose()
    if not manager.started.is_set():
        raise failures[0] if failures else StartupError("the manager stopped while starting")
    try:
        yield manager
    finally:
        task.cancel()
        await stack.aclose()
    if failures:
        raise failures[0]


async def run(manager_settings: settings.ManagerSettings) -> None:
    """Run until cancelled (the CLI cancels on SIGTERM/SIGINT)."""
    await Manager(manager_settings).run()


def known_controllers() -> Sequence[str]:
    return tuple(registry.FACTORIES)
