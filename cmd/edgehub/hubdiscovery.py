"""``edgehub hub --enable-discovery``: the discovery agent run beside the hub, in its process.

Its API traffic goes through the hub's own proxy, so it keeps working from the cache while the
cloud is away. Discovery (gRPC, the handlers) is imported only when the flag asks for it: a hub
without it never loads them (``tests/unit/hub/test_hub_imports.py``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import click

from yurthub import assembly, lifecycle, settings


def startup_failure(error: BaseException) -> BaseException | None:
    """The discovery agent's StartupError in ``error`` (the hub's TaskGroup may wrap it)."""
    from discovery.agent import running as agent_running

    if isinstance(error, agent_running.StartupError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = startup_failure(inner)
            if found is not None:
                return found
    return None


def companion(
    opts: dict[str, object], hub_settings: settings.HubSettings, *, user_agent: str
) -> lifecycle.Companion:
    """The discovery agent, run beside the hub and talking to the cloud through it."""
    # Imported here: a hub without discovery does not pay for grpc and the handlers.
    from discovery.agent import running as agent_running
    from discovery.agent import settings as agent_settings

    handlers = tuple(h.strip() for h in str(opts["embedded_handlers"]).split(",") if h.strip())
    unknown = sorted(set(handlers) - set(agent_settings.EMBEDDED_HANDLERS))
    if unknown:
        raise click.BadParameter(f"unknown embedded handlers: {', '.join(unknown)}")
    try:
        networks = agent_settings.parse_handler_networks(str(opts["handler_networks"]))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--handler-networks") from e
    try:
        writable = agent_settings.parse_handler_names(str(opts["writable_mount_handlers"]))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--writable-mount-handlers") from e
    try:
        protected = agent_settings.parse_protected_paths(str(opts["protected_mount_paths"]))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--protected-mount-paths") from e
    node_name = hub_settings.node_name
    # The hub's keys, kubeconfigs and cache: wherever the flags put them.
    hub_paths = (
        hub_settings.certs.root_dir.absolute(),
        hub_settings.cache.disk_cache_path.absolute(),
    )

    @contextlib.asynccontextmanager
    async def companion(node: assembly.Node) -> AsyncIterator[object]:
        async with _agent(node) as agent:
            # ``edgehub status`` shows discovery from the hub's /v1/status.
            async def section() -> dict[str, Any]:
                found: dict[str, Any] = agent.status()
                return found

            node.hub.status_sections["discovery"] = section
            try:
                yield agent
            finally:
                node.hub.status_sections.pop("discovery", None)

    def _agent(node: assembly.Node) -> contextlib.AbstractAsyncContextManager[Any]:
        def path(key: str) -> pathlib.Path:
            value = opts[key]
            assert isinstance(value, pathlib.Path)
            return value

        return agent_running.running(
            agent_settings.AgentSettings(
                node_name=node_name,
                kube=agent_settings.KubeSettings(url=node.hub.proxy_url, user_agent=user_agent),
                discovery_handlers_dir=path("discovery_handlers_directory"),
                embedded_handlers=handlers,
                handler_environ=dict(os.environ),
                device_plugins_dir=path("device_plugins_dir"),
                pod_resources_socket=path("pod_resources_socket"),
                cdi_dir=path("cdi_dir"),
                handler_networks=networks,
                writable_mount_handlers=writable,
                protected_mount_paths=protected,
                hub_paths=hub_paths,
                metrics_port=None,
            )
        )

    return companion
