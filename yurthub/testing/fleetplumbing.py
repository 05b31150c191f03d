"""The fleet's plumbing (``fleets``): a bounded
thread pool for calls to every member at once, the admin's client of the apiserver, and a
node's edge link (``edgehub partition``: cut, healed, counting the bytes it relays).

Invariant: ``Link.stop`` ends its process.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from yurthub.testing import edgenodes, processes, realcluster
from yurthub.testing import ports as portpicking


def in_parallel(calls: Iterable[Callable[[], Any]], workers: int = 16) -> list[Any]:
    """Run ``calls`` on a bounded thread pool, at (nearly) the same instant; their results in
    order (the first exception is raised after all ended)."""
    todo = list(calls)
    if not todo:
        return []
    with concurrent.futures.ThreadPoolExecutor(min(workers, len(todo))) as pool:
        futures = [pool.submit(call) for call in todo]
        return [f.result() for f in futures]


# --- the cloud, read as the admin -------------------------------------------------------------


class Admin:
    """The cluster's API as ``kubernetes-admin``, over one TLS context (no kubectl per read)."""

    def __init__(self, cluster: realcluster.RealCluster) -> None:
        self.cluster = cluster
        self._context: ssl.SSLContext = cluster.admin_ssl_context()

    def raw(self, path: str, *, timeout: float = 30.0, limit: int = 256 << 20) -> bytes:
        request = urllib.request.Request(
            self.cluster.url + path, headers={"Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._context) as r:
                body: bytes = r.read(limit)
                return body
        except urllib.error.HTTPError as e:
            e.close()  # its response holds the connection
            raise

    def get(self, path: str, **query: str) -> dict[str, Any]:
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        doc: dict[str, Any] = json.loads(self.raw(path))
        return doc

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get(path, **query).get("items") or []
        return items

    def metrics(self) -> str:
        return self.raw("/metrics", timeout=20).decode("utf-8", "replace")


# --- a node's pieces ---------------------------------------------------------------------------


class Link:
    """A node's edge link: ``edgehub partition`` between the node and the apiserver."""

    def __init__(
        self, name: str, upstream: int, log: pathlib.Path, *, die: bool, ports: portpicking.Ports
    ) -> None:
        self.port, self.control_port = ports.take(2)
        self.process = processes.Process(
            f"link {name}",
            edgenodes.edgehub_argv(
                "partition",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--upstream",
                f"127.0.0.1:{upstream}",
                "--control",
                f"127.0.0.1:{self.control_port}",
            ),
            log,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            die_with_parent=die,
        )

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process.start()

    def ready(self) -> bool:
        if not self.process.alive:
            raise self.process.failure("exited")
        try:
            self.state()
        except OSError:
            return False
        return True

    def state(self) -> dict[str, Any]:
        """The injector's state: ``mode``, ``accepted``, ``relayed`` bytes each way."""
        status, body = edgenodes.http("GET", f"http://127.0.0.1:{self.control_port}/mode")
        if status != 200:
            raise OSError(f"link control answered {status}")
        doc: dict[str, Any] = json.loads(body)
        return doc

    def relayed(self) -> tuple[int, int]:
        """(bytes to the apiserver, bytes from it) so far."""
        relayed = self.state()["relayed"]
        return int(relayed["to_upstream"]), int(relayed["from_upstream"])

    def set_mode(self, mode: str) -> None:
        url = f"http://127.0.0.1:{self.control_port}/mode?mode={mode}"
        status, body = edgenodes.http("PUT", url)
        if status != 200:
            raise processes.ProcessError(f"link refused mode {mode}: {status} {body!r}")

    def stop(self) -> None:
        self.process.stop()
