"""``edgehub hub`` as the migration step (``--migrate-from-yurthub=auto``, the default): the
first start on a YurtHub node imports YurtHub's cache by itself, a later start never again,
YurtHub's files stay byte for byte (rolling back works), and a port YurtHub still holds delays
the start instead of crashing it. Also the image's ``edgehub edgehub ...`` argument form."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import pathlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from yurthub.cache import yurthubfiles
from yurthub.testing import ports, processes

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "edge-1"
KUBELET = {"User-Agent": "kubelet/v1.30.2", "Accept": "application/json"}


def _write(root: pathlib.Path, relative: str, obj: Any) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _pod(name: str, rv: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": str(rv)},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]},
    }


def _digest(root: pathlib.Path) -> dict[str, str]:
    """YurtHub's files (not edgehub's own beside them: database, journal, keys, marker)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] not in yurthubfiles.OWN_FILES
    }


def _kubeconfig(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://x'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    return path


class Hub:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stderr: list[str] = []

    async def stderr_line(self, containing: str) -> str:
        """Read stderr up to the line holding ``containing`` (kept in ``stderr``)."""
        assert self.proc.stderr is not None
        async with asyncio.timeout(20):
            while True:
                line = (await self.proc.stderr.readline()).decode()
                assert line, f"the hub ended before saying {containing!r}: {self.stderr}"
                self.stderr.append(line)
                if containing in line:
                    return line

    async def ready(self) -> dict[str, str]:
        assert self.proc.stdout is not None
        # Its addresses once it listens (ready waits for the cloud or a cached list).
        return await processes.read_announcement(self.proc.stdout, "EDGEHUB_HUB_LISTENING", 20)

    async def stop(self) -> str:
        """Stop the hub; all it wrote on stderr."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        _, rest = await self.proc.communicate()
        return "".join(self.stderr) + rest.decode()


@contextlib.asynccontextmanager
async def hub(tmp_path: pathlib.Path, *extra: str) -> AsyncIterator[Hub]:
    proc = await asyncio.create_subprocess_exec(
        EDGEHUB, "hub", f"--server-addr=https://127.0.0.1:{ports.closed_port()}",
        f"--node-name={NODE}", f"--kubeconfig={_kubeconfig(tmp_path)}",
        "--allow-system-trust-store", "--proxy-secure-port=0", "--serve-port=0", *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    running = Hub(proc)
    try:
        yield running
    finally:
        if proc.returncode is None:
            await running.stop()


async def _pod_names(proxy: str) -> list[str]:
    query = {"fieldSelector": f"spec.nodeName={NODE}"}
    async with (
        aiohttp.ClientSession() as s,
        s.get(proxy + "/api/v1/pods", params=query, headers=KUBELET) as r,
    ):
        assert r.status == 200, await r.text()
        return sorted(p["metadata"]["name"] for p in (await r.json())["items"])


async def test_the_first_start_imports_yurthubs_cache_once(tmp_path: pathlib.Path) -> None:
    cache = tmp_path / "etc-kubernetes-cache"  # one directory for both, as on a node
    _write(cache, "kubelet/pods.v1.core/default/web-1", _pod("web-1", 101))
    _write(cache, "kubelet/pods.v1.core/default/web-2", _pod("web-2", 102))
    before = _digest(cache)
    flags = (f"--disk-cache-path={cache}", f"--yurthub-cache-dir={cache}", "--proxy-port=0")

    async with hub(tmp_path, *flags) as first:
        fields = await first.ready()
        assert await _pod_names(fields["proxy"]) == ["web-1", "web-2"]  # offline, imported
        said = await first.stop()
    assert "imported YurtHub's cache: 2 objects and 1 lists of kubelet" in said, said
    assert _digest(cache) == before  # YurtHub's files as they were: rolling back works
    marker = json.loads((cache / ".imported-from-yurthub").read_text())
    assert marker["from"] == str(cache) and marker["objects"] == 2

    # YurtHub's tree changes after the import (say, a rollback and a second migration without
    # removing edgehub's database): edgehub keeps its own cache, never imports twice.
    _write(cache, "kubelet/pods.v1.core/default/web-3", _pod("web-3", 103))
    async with hub(tmp_path, *flags) as second:
        fields = await second.ready()
        assert await _pod_names(fields["proxy"]) == ["web-1", "web-2"]
        said = await second.stop()
    assert "imported YurtHub's cache" not in said, said


async def test_off_imports_nothing(tmp_path: pathlib.Path) -> None:
    yurthub, own = tmp_path / "yurthub-cache", tmp_path / "edgehub-cache"
    _write(yurthub, "kubelet/pods.v1.core/default/web-1", _pod("web-1", 101))
    async with hub(
        tmp_path, f"--disk-cache-path={own}", f"--yurthub-cache-dir={yurthub}",
        "--migrate-from-yurthub=off", "--proxy-port=0",
    ) as off:  # fmt: skip
        await off.ready()
        said = await off.stop()
    assert "imported YurtHub's cache" not in said, said
    assert not (own / ".imported-from-yurthub").exists()


async def test_a_port_yurthub_still_holds_delays_the_start(tmp_path: pathlib.Path) -> None:
    # From the ledger: once "YurtHub" lets go, an ephemeral port could be taken by any
    # outgoing connection before the hub binds it.
    port = ports.closed_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        started = hub(tmp_path, f"--disk-cache-path={tmp_path / 'c'}", f"--proxy-port={port}")
        async with started as waiting:
            line = await waiting.stderr_line("waiting for YurtHub to stop")
            assert f"127.0.0.1:{port} is in use" in line
            held.close()  # YurtHub stopped
            fields = await waiting.ready()
            assert fields["proxy"] == f"http://127.0.0.1:{port}"


async def test_a_port_held_past_the_deadline_exits_3(tmp_path: pathlib.Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        async with hub(
            tmp_path, f"--disk-cache-path={tmp_path / 'c'}", f"--proxy-port={port}",
            "--port-wait-timeout=1s",
        ) as stuck:  # fmt: skip
            _, err = await asyncio.wait_for(stuck.proc.communicate(), 30)
    assert stuck.proc.returncode == 3, err
    last = err.decode().strip().splitlines()[-1]
    assert last == (
        f"edgehub hub: cannot start: 127.0.0.1:{port} is still in use after 1s "
        "(is YurtHub stopped?)"
    ), err


def test_the_images_entrypoint_form_runs() -> None:
    """ENTRYPOINT ["edgehub"] + `ctr run IMAGE ID edgehub cache ...` runs `edgehub edgehub ...`."""
    for argv in ([EDGEHUB, "edgehub", "cache", "--help"], [EDGEHUB, "cache", "--help"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert "import-yurthub" in done.stdout
