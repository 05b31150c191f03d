"""The slot reclaimer: free slots this node holds but kubelet no longer uses.

Every ``reclaim_interval`` it asks kubelet's pod-resources API (``v1 List``)
which device ids of ``akri.sh/`` resources are assigned to containers, and
compares them with the slots this node holds (``slots.used_device_ids`` —
un-prefixed ``<instance>-<i>`` and vdev ids, exactly what we advertised;
Akri compared ``akri.sh/``-prefixed ids and never reclaimed Instance-level
slots, reference §5.6 [quirk]). A held slot kubelet has not reported for
``reclaim_grace`` seconds is released with an RV-guarded write; failures are
retried on the next tick. When pod-resources is unreachable nothing is freed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from discovery import grpcserving
from discovery.agent import instances, naming, settings, slots
from discovery.proto import podresources_v1_pb2 as pr
from discovery.proto import podresources_v1_pb2_grpc as pr_grpc
from kubecontrol import kubeapi

logger = logging.getLogger(__name__)


async def devices_in_use(socket: Path, deadline: float = 5.0) -> set[str]:
    """Device ids of ``akri.sh/*`` resources kubelet reports as assigned."""
    async with grpcserving.unix_channel(socket) as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
        response = await stub.List(pr.ListPodResourcesRequest(), timeout=deadline)
    used: set[str] = set()
    for pod in response.pod_resources:
        for container in pod.containers:
            for device in container.devices:
                if device.resource_name.startswith(f"{naming.AKRI_PREFIX}/"):
                    used.update(device.device_ids)
    return used


class Reclaimer:
    def __init__(
        self,
        agent_settings: settings.AgentSettings,
        api: kubeapi.KubeApi,
        held: Callable[[], Mapping[str, Sequence[naming.SlotUsage]]],
        namespace_of: Callable[[str], str | None],
    ) -> None:
        self.settings = agent_settings
        self.api = api
        self.held = held
        self.namespace_of = namespace_of
        self.unused_since: dict[str, float] = {}
        self.freed = 0

    async def tick(self) -> None:
        socket = self.settings.pod_resources_socket
        if socket is None:
            return
        try:
            reported = await devices_in_use(socket)
        except grpc.aio.AioRpcError as e:
            logger.debug("pod-resources unavailable: %s", e.code().name)
            return
        node = self.settings.node_name
        theoretical = slots.used_device_ids(self.held(), node)
        to_free, self.unused_since = slots.stale_slots(
            theoretical,
            reported,
            self.unused_since,
            time.monotonic(),
            self.settings.timings.reclaim_grace,
        )
        for device_id in to_free:
            instance, slot_key = theoretical[device_id]
            namespace = self.namespace_of(instance)
            if namespace is None:
                continue
            try:
                await instances.write(
                    self.api,
                    namespace,
                    instance,
                    instances.set_usage(_release(slot_key, node)),
                    attempts=self.settings.timings.write_attempts,
                )
            except (kubeapi.KubeError, instances.WriteFailed, slots.SlotUnavailable) as e:
                logger.warning("could not free slot %s: %s", slot_key, e)
                # Keep it stale so the next tick retries at once.
                self.unused_since[device_id] = 0.0
                continue
            self.freed += 1
            logger.info(
                "freed slot %s of %s: kubelet no longer uses %s", slot_key, instance, device_id
            )

    async def run(self) -> None:
        logger.info("reclaiming unused slots - start")
        while True:
            await self.tick()
            await asyncio.sleep(self.settings.timings.reclaim_interval)


def _release(slot_key: str, node: str) -> Callable[[dict[str, Any]], dict[str, str]]:
    def compute(current: dict[str, Any]) -> dict[str, str]:
        return slots.release_slots(instances.usage_of(current), [slot_key], node)

    return compute
