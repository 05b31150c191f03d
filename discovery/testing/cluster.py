"""The real ``kubectl`` and Akri Instances from async tests, and waiting for a condition.

Tests run the simulated apiserver on their own event loop, so ``kubectl`` has to run as an
asyncio subprocess: a blocking ``subprocess.run`` would stall the very server it talks to.
``cluster`` is anything with a ``kubeconfig_path`` (``yurthub.testing.simapiserver``'s
``SimApiserver``; ``discovery`` does not import the hub, so it is not named here).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

KUBECTL = os.environ.get("EDGEHUB_KUBECTL", "/usr/bin/kubectl")


class Cluster(Protocol):
    @property
    def kubeconfig_path(self) -> os.PathLike[str] | str: ...


async def kubectl(
    cluster: Cluster, *args: str, stdin: str | None = None, check: bool = True
) -> str:
    """``kubectl --kubeconfig=<cluster's> ARGS``; its stdout. ``check``: a non-zero exit
    raises ``AssertionError`` with kubectl's stderr."""
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        f"--kubeconfig={os.fspath(cluster.kubeconfig_path)}",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {err.decode()}")
    return out.decode()


async def instances(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Every Akri Instance, in all namespaces, by name (as ``kubectl get akrii -A`` sees them)."""
    listed = json.loads(await kubectl(cluster, "get", "akrii", "-A", "-o", "json"))
    return {i["metadata"]["name"]: i for i in listed["items"]}


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 15.0) -> None:
    """Poll ``check`` until it is true; ``AssertionError`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.1)
