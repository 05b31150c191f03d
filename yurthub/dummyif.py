"""The optional dummy interface (``--enable-dummy-if``): a node-local address for the hub.

YurtHub puts ``169.254.2.1`` on a dummy interface (``hub-dummy0``) so that pods reach the hub
at an address that is the same on every node and never leaves it (the ``masterservice`` filter
points ``KUBERNETES_SERVICE_HOST`` there). This module creates it with the ``ip`` command
(iproute2), re-ensures it every ``recheck`` seconds (someone may delete it) and deletes it when
the hub stops. It needs CAP_NET_ADMIN; without it ``ensure`` fails with the command's message.

Each command runs as a subprocess with a timeout (never blocking the event loop); a failure is
``DummyIfError`` naming the command and its stderr.

A kernel built without the dummy driver (``CONFIG_DUMMY`` unset: some minimal VM kernels)
answers "Unknown device type": the interface is then made as an empty bridge, which holds a
local address just the same (nothing is attached to it), with one warning saying so.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import shutil

log = logging.getLogger(__name__)

COMMAND_TIMEOUT = 10.0


class DummyIfError(RuntimeError):
    """An ``ip`` command failed (message: the command and what it said)."""


class DummyInterface:
    def __init__(self, name: str, ip: str, *, recheck: float = 60.0, ip_command: str = "") -> None:
        self.name = name
        self.address = ipaddress.ip_address(ip)
        self.recheck = recheck
        self._ip = ip_command or shutil.which("ip") or "/sbin/ip"
        self._said = ""
        self.kind = "dummy"
        """The link type in use: ``dummy``, or ``bridge`` on a kernel without the dummy driver."""

    async def _run(self, *args: str, check: bool = True) -> tuple[int, str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                self._ip,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            raise DummyIfError(f"cannot run {self._ip}: {e.strerror}") from e
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT):
                out, err = await proc.communicate()
        except TimeoutError as e:
            proc.kill()
            await proc.wait()
            raise DummyIfError(f"ip {' '.join(args)}: timed out") from e
        rc = proc.returncode or 0
        if check and rc != 0:
            raise DummyIfError(f"ip {' '.join(args)}: {err.decode(errors='replace').strip()}")
        return rc, out.decode(errors="replace")

    async def ensure(self) -> bool:
        """Create what is missing; True when something had to be (re)made."""
        made = False
        rc, _ = await self._run("link", "show", "dev", self.name, check=False)
        if rc != 0:
            try:
                await self._run("link", "add", self.name, "type", self.kind)
            except DummyIfError as e:
                if self.kind != "dummy" or "Unknown device type" not in str(e):
                    raise
                log.warning(
                    "this kernel has no dummy interface driver: %s is made as an empty bridge",
                    self.name,
                )
                self.kind = "bridge"
                await self._run("link", "add", self.name, "type", self.kind)
            made = True
        prefix = 32 if self.address.version == 4 else 128
        _, addrs = await self._run("-o", "addr", "show", "dev", self.name)
        if f" {self.address}/" not in addrs:
            await self._run("addr", "add", f"{self.address}/{prefix}", "dev", self.name)
            made = True
        _, link = await self._run("-o", "link", "show", "dev", self.name)
        if ",UP" not in link and "<UP" not in link:
            await self._run("link", "set", "dev", self.name, "up")
            made = True
        return made

    async def run(self) -> None:
        """Until cancelled: re-ensure every ``recheck`` seconds (one line per distinct failure)."""
        while True:
            await asyncio.sleep(self.recheck)
            try:
                if await self.ensure():
                    log.warning(
                        "dummy interface %s (%s) was missing: re-created", self.name, self.address
                    )
                self._said = ""
            except DummyIfError as e:
                if str(e) != self._said:
                    self._said = str(e)
                    log.error("dummy interface %s: %s", self.name, e)

    async def remove(self) -> None:
        rc, _ = await self._run("link", "show", "dev", self.name, check=False)
        if rc == 0:
            try:
                await self._run("link", "del", self.name)
            except DummyIfError as e:
                log.warning("could not delete dummy interface %s: %s", self.name, e)
