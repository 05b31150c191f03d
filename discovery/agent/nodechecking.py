"""Whether the agent's own Node exists: a GET at start, and one clear line when it does not.

An agent whose ``--node-name`` names no Node (mistyped, the node deleted while its agent still
runs, a simulator started with ``--seed none``) discovers devices and writes their Instances
all the same, and nothing else would say why no pod can ever use them. ``NodeCheck.run`` GETs
the Node; a 404 is logged once, as one warning naming the flag, and the agent keeps running
(the node may register later: kubelet may start after the agent). The GET is retried with a
capped, doubling back-off until the Node is there, which is logged once too; then the task
ends. Other failures (the apiserver away, an RBAC without ``get nodes``) are retried the
same way and logged once per distinct cause, then at debug.

Danger: behind a hub that is offline and holds no copy of the Node, the 404 is the hub's, and
the line says "does not exist" then too (nothing in the answer tells them apart); the next
GET once the cloud is back corrects it ("now exists").
"""

from __future__ import annotations

import asyncio
import logging

from kubecontrol import kubeapi

logger = logging.getLogger(__name__)

_CAUSES_LOGGED = 16
"""Distinct failure causes logged at warning; past this many, further ones only at debug."""


class NodeCheck:
    def __init__(self, api: kubeapi.KubeApi, node_name: str, initial: float, cap: float) -> None:
        if initial <= 0 or cap < initial:
            raise ValueError(f"node check needs 0 < initial <= cap, got {initial} and {cap}")
        self.api = api
        self.node_name = node_name
        self.initial = initial
        self.cap = cap
        self.exists: bool | None = None
        """None until the apiserver answered; then whether the Node exists."""
        self.attempts = 0
        """GETs sent so far."""

    async def run(self) -> None:
        """Until the Node is found (or cancelled)."""
        delay = self.initial
        causes: set[str] = set()
        while True:
            self.attempts += 1
            try:
                await self.api.get(kubeapi.NODES, "", self.node_name)
            except kubeapi.NotFound:
                if self.exists is not False:
                    logger.warning(
                        "node %s does not exist in the cluster: check --node-name (the agent "
                        "keeps running; the manager leaves Instances of unknown nodes alone)",
                        self.node_name,
                    )
                self.exists = False
            except kubeapi.KubeError as e:
                cause = str(e)
                if cause not in causes and len(causes) < _CAUSES_LOGGED:
                    causes.add(cause)
                    logger.warning(
                        "cannot check that node %s exists (%s); retrying", self.node_name, cause
                    )
                else:
                    logger.debug("cannot check that node %s exists: %s", self.node_name, cause)
            else:
                if self.exists is False:
                    logger.info("node %s now exists in the cluster", self.node_name)
                else:
                    logger.debug("node %s exists", self.node_name)
                self.exists = True
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.cap)
