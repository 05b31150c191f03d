"""A loopback HTTP/1.1 relay that renames a client's User-Agent: kubemark's hollow kubelet and
kube-proxy say ``hollow-kubelet`` and ``hollow-proxy`` (hard-coded in kubemark); OpenYurt's
YurtHub knows kubelet only by ``kubelet`` exactly (its node-lease and get-node handling, cache
agents, filters), so in front of YurtHub the fleet puts this relay:

    python -m yurthub.testing.agentshim --listen 127.0.0.1:P --upstream 127.0.0.1:Q \\
        --rename hollow-kubelet=kubelet --rename hollow-proxy=kube-proxy

Each request head's ``User-Agent`` whose first word is a renamed one is rewritten; the rest
passes byte for byte. Requests are framed by ``Content-Length`` (client-go's); a chunked or
upgraded request turns the rest of that connection into a plain pipe. Responses are piped as
they come (Go's client never pipelines, so no response framing is needed). edgehub needs no
relay: it treats kubemark's names as kubelet's and kube-proxy's
(``requestinfo.COMPONENT_ALIASES``).

Bounded: a request head is at most 64 KiB (a longer one ends the connection), one chunk is
held per direction. Loopback only. ``rename`` and ``framing`` are PURE.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Mapping, Sequence

from yurthub.testing import partition

HEAD_LIMIT = 64 << 10
CHUNK = 64 << 10


def rename(head: bytes, renames: Mapping[str, str]) -> bytes:
    """``head`` (a request line and headers, up to the blank line) with the User-Agent's first
    word renamed (``hollow-kubelet/v1.37`` -> ``kubelet/v1.37``). PURE."""
    lines = head.split(b"\r\n")
    for i, line in enumerate(lines):
        name, sep, value = line.partition(b":")
        if not sep or name.strip().lower() != b"user-agent":
            continue
        text = value.decode("latin-1").strip()
        for old, new in renames.items():
            if text == old or text.startswith((f"{old}/", f"{old} ")):
                lines[i] = b"User-Agent: " + (new + text[len(old) :]).encode("latin-1")
                break
    return b"\r\n".join(lines)


def framing(head: bytes) -> int | None:
    """The body length of a request with this head (0: none); None when the rest of the
    connection must be piped as it is (chunked, an upgrade, a length that does not parse). PURE."""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        key, val = name.strip().lower(), value.strip().lower()
        if key == b"transfer-encoding" and val != b"identity":
            return None
        if key == b"upgrade" or (key == b"connection" and b"upgrade" in val):
            return None
        if key == b"content-length":
            if not val.isdigit():
                return None
            length = int(val)
    return length


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


async def _requests(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, renames: Mapping[str, str]
) -> None:
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if e.partial:
                writer.write(e.partial)
            if writer.can_write_eof():
                writer.write_eof()
            return
        writer.write(rename(head, renames))
        length = framing(head)
        if length is None:
            await _pipe(reader, writer)
            return
        while length > 0:
            data = await reader.read(min(CHUNK, length))
            if not data:
                return
            writer.write(data)
            length -= len(data)
            await writer.drain()
        await writer.drain()


class Relay:
    """A listening relay; ``close`` ends its listener and every connection it holds."""

    def __init__(self, upstream: tuple[str, int], renames: Mapping[str, str]) -> None:
        self.upstream = upstream
        self.renames = dict(renames)
        self.server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def start(self, listen: tuple[str, int]) -> Relay:
        for host in (listen[0], self.upstream[0]):
            partition.require_loopback(host)
        self.server = await asyncio.start_server(self._serve, *listen, limit=HEAD_LIMIT)
        return self

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        handlers = list(self._handlers)
        if handlers:
            await asyncio.wait(handlers, timeout=2.0)

    async def __aenter__(self) -> Relay:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(client_writer)
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream, limit=HEAD_LIMIT)
            self._writers.add(up_writer)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(
                    _requests(client_reader, up_writer, self.renames), name="shim-requests"
                )
                tg.create_task(_pipe(up_reader, client_writer), name="shim-responses")
        except* (OSError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            for w in (up_writer, client_writer):
                if w is not None:
                    w.transport.abort()
                    self._writers.discard(w)
            self._handlers.discard(task)


async def start(
    listen: tuple[str, int], upstream: tuple[str, int], renames: Mapping[str, str]
) -> Relay:
    """A started relay (``listen`` port 0: any free one, see ``Relay.port``)."""
    return await Relay(upstream, renames).start(listen)


async def serve(
    listen: tuple[str, int], upstream: tuple[str, int], renames: Mapping[str, str]
) -> None:
    """Relay until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with await start(listen, upstream, renames):
        print(f"agentshim listening={listen[0]}:{listen[1]}", flush=True)
        await stop.wait()


def _address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--rename", action="append", default=[], help="OLD=NEW")
    args = parser.parse_args(argv)
    renames = dict(r.split("=", 1) for r in args.rename)
    asyncio.run(serve(_address(args.listen), _address(args.upstream), renames))
    return 0


if __name__ == "__main__":
    sys.exit(main())
