"""``pods/<name>/exec`` over WebSocket, speaking the Kubernetes channel protocol kubectl 1.32 uses.

Subprotocols ``v5.channel.k8s.io`` and ``v4.channel.k8s.io``: every binary
message starts with a channel byte (0 stdin, 1 stdout, 2 stderr, 3 error/status
JSON, 4 resize); v5 adds 255 = "close stream <n>", which is how kubectl says
stdin reached EOF. The exit code reaches the client as a ``Status`` on channel 3.

No process runs. A handful of commands are emulated so tests can observe
stdin/stdout/stderr and exit codes: ``echo``, ``cat`` (copies stdin until it
closes), ``hostname`` (the pod name), ``env``/``printenv``, ``sleep N``,
``true``/``false``, ``pwd``, ``whoami``, ``date``, ``exit N`` and
``sh|bash -c '<a; b && c>'`` (or an interactive ``sh`` reading lines from
stdin). Anything else exits 127 with "not found" on stderr.

SPDY (the pre-1.31 transport) is not implemented: a SPDY upgrade is refused
with 400, which is what makes kubectl stay on WebSocket.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import shlex
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from yurthub.testing.sim import context, crud, errors, paths, resources, storage, subresources

log = logging.getLogger(__name__)

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
MAX_SLEEP = 3600.0
STDIN_QUEUE = 64
# A container runtime takes tens of milliseconds to start an exec'd process; output never
# follows the upgrade at once. kubectl 1.32 relies on that (fixed by 1.34): it reads the connection
# while still creating its streams and drops (then fails on) output that comes first.
PROCESS_START = 0.02


class Session:
    """One exec: the pod, a bounded stdin queue, and writers for stdout/stderr."""

    def __init__(
        self,
        pod: Mapping[str, Any],
        container: str,
        send: Callable[[int, bytes], Awaitable[None]],
        *,
        tty: bool,
        clock: Callable[[], float],
    ) -> None:
        self.pod = pod
        self.container = container
        self._send = send
        self.tty = tty
        self.clock = clock
        self.stdin: asyncio.Queue[bytes | None] = asyncio.Queue(STDIN_QUEUE)
        self._pending = b""
        self._eof = False

    async def out(self, text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        if self.tty:
            data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        if data:
            await self._send(STDOUT, data)

    async def err(self, text: str) -> None:
        data = text.encode()
        if self.tty:
            await self.out(data)
        elif data:
            await self._send(STDERR, data)

    async def read(self) -> bytes | None:
        """The next stdin chunk, or None at EOF."""
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        if self._eof:
            return None
        chunk = await self.stdin.get()
        if chunk is None:
            self._eof = True
        return chunk

    async def readline(self) -> str | None:
        buf = b""
        while b"\n" not in buf:
            chunk = await self.read()
            if chunk is None:
                if buf:
                    return buf.decode(errors="replace")
                return None
            buf += chunk
        line, _, rest = buf.partition(b"\n")
        self._pending = rest + self._pending
        return line.decode(errors="replace").rstrip("\r")

    def environment(self) -> dict[str, str]:
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": str((self.pod.get("metadata") or {}).get("name", "")),
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "KUBERNETES_SERVICE_PORT": "443",
            "KUBERNETES_PORT": "tcp://10.96.0.1:443",
            "HOME": "/root",
        }
        for c in (self.pod.get("spec") or {}).get("containers") or []:
            if isinstance(c, dict) and c.get("name") == self.container:
                for e in c.get("env") or []:
                    if isinstance(e, dict) and "value" in e:
                        env[str(e.get("name"))] = str(e.get("value"))
        return env


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


async def run(argv: list[str], session: Session) -> int:
    """Run an emulated command; returns its exit code."""
    try:
        return await _command(argv, session, shell=False)
    except _Exit as e:
        return e.code


async def _command(argv: list[str], s: Session, *, shell: bool) -> int:
    if not argv:
        return 0
    name, args = argv[0].rsplit("/", 1)[-1], argv[1:]
    if name == "echo":
        newline = True
        if args and args[0] == "-n":
            newline, args = False, args[1:]
        await s.out(" ".join(args) + ("\n" if newline else ""))
        return 0
    if name == "cat":
        if args:
            if args == ["/etc/hostname"]:
                await s.out(s.environment()["HOSTNAME"] + "\n")
                return 0
            await s.err(f"cat: {args[0]}: No such file or directory\n")
            return 1
        while (chunk := await s.read()) is not None:
            await s.out(chunk)
        return 0
    if name == "hostname":
        await s.out(s.environment()["HOSTNAME"] + "\n")
        return 0
    if name in ("env", "printenv"):
        env = s.environment()
        if name == "printenv" and args:
            if args[0] not in env:
                return 1
            await s.out(env[args[0]] + "\n")
            return 0
        await s.out("".join(f"{k}={v}\n" for k, v in env.items()))
        return 0
    if name == "sleep":
        try:
            seconds = float(args[0]) if args else -1
        except ValueError:
            seconds = -1
        if seconds < 0:
            await s.err(f"sleep: invalid time interval '{args[0] if args else ''}'\n")
            return 1
        await asyncio.sleep(min(seconds, MAX_SLEEP))
        return 0
    if name == "true":
        return 0
    if name == "false":
        return 1
    if name == "pwd":
        await s.out("/\n")
        return 0
    if name == "whoami":
        await s.out("root\n")
        return 0
    if name == "date":
        now = datetime.datetime.fromtimestamp(s.clock(), datetime.UTC)
        await s.out(now.strftime("%a %b %d %H:%M:%S UTC %Y") + "\n")
        return 0
    if name == "exit":
        try:
            raise _Exit(int(args[0]) & 0xFF if args else 0)
        except ValueError:
            raise _Exit(2) from None
    if name in ("sh", "bash", "ash"):
        if len(args) >= 2 and args[0] == "-c":
            return await _script(args[1], s)
        if not args:
            code = 0
            while (line := await s.readline()) is not None:
                code = await _script(line, s)
            return code
    message = (
        f"{argv[0]}: not found\n"
        if shell
        else (f'exec: "{argv[0]}": executable file not found in $PATH\n')
    )
    await s.err(f"sh: {message}" if shell else message)
    return 127


async def _script(text: str, s: Session) -> int:
    """A tiny shell: commands joined by ';', '&&', '||', quoted words, ``exit N``."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as e:
        await s.err(f"sh: syntax error: {e}\n")
        return 2
    code = 0
    argv: list[str] = []
    skip = False
    for token in [*tokens, ";"]:
        if token in (";", "&&", "||"):
            if argv and not skip:
                code = await _command(argv, s, shell=True)
            argv = []
            skip = (token == "&&" and code != 0) or (token == "||" and code == 0)
            continue
        argv.append(token)
    return code


def exit_status(argv: list[str], code: int) -> bytes:
    if code == 0:
        return orjson.dumps({"metadata": {}, "status": "Success"})
    return orjson.dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command "
            f"[{' '.join(argv)}], exit code {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    )


async def exec_(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    assert rp.name is not None
    query = request.query
    pod = ctx.state.get_object(rt, rp.namespace, rp.name)
    container = subresources.container_of(pod, query.get("container"))
    argv = list(query.getall("command", []))
    if not argv:
        raise errors.bad_request("you must specify at least one command for the container")
    upgrade = request.headers.get("Upgrade", "").lower()
    if upgrade != "websocket":
        raise errors.bad_request(
            "the simulated apiserver supports exec over WebSocket (v5.channel.k8s.io, "
            "v4.channel.k8s.io) only; SPDY is not implemented"
        )
    ws = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=1024 * 1024)
    await ws.prepare(request)
    if ws.ws_protocol not in PROTOCOLS:
        await ws.close(code=aiohttp.WSCloseCode.PROTOCOL_ERROR, message=b"unsupported subprotocol")
        return ws
    task = ctx.track_stream()
    try:
        await _session(ctx, ws, pod, container, argv, query)
    finally:
        ctx.untrack_stream(task)
    return ws


async def _session(
    ctx: context.ServerContext,
    ws: web.WebSocketResponse,
    pod: storage.Stored,
    container: str,
    argv: list[str],
    query: Mapping[str, str],
) -> None:
    tty = bool(crud.flag(query, "tty"))
    wants_stdin = bool(crud.flag(query, "stdin"))
    send_lock = asyncio.Lock()

    async def send(channel: int, data: bytes) -> None:
        async with send_lock:
            if not ws.closed:
                await ws.send_bytes(bytes([channel]) + data)

    session = Session(pod.obj, container, send, tty=tty, clock=ctx.state.clock)
    if not wants_stdin:
        session.stdin.put_nowait(None)
    # Tell the client the streams are up, as the kubelet does (empty message, lowest channel).
    await send(STDOUT if crud.flag(query, "stdout") is not False else STDERR, b"")

    async def pump_input() -> None:
        async for msg in ws:
            if msg.type is not aiohttp.WSMsgType.BINARY or not msg.data:
                continue
            data: bytes = msg.data
            channel, payload = data[0], data[1:]
            if channel == STDIN and wants_stdin:
                await session.stdin.put(payload)
            elif channel == CLOSE and payload[:1] == bytes([STDIN]):
                await session.stdin.put(None)
        # The client hung up: no more input will come.
        await session.stdin.put(None)

    code = 0
    async with asyncio.TaskGroup() as tg:
        reader = tg.create_task(pump_input(), name="exec-stdin")
        await asyncio.sleep(PROCESS_START)
        code = await run(argv, session)
        await send(ERROR, exit_status(argv, code))
        await ws.close()
        reader.cancel()
    log.debug(
        "exec %s in %s/%s exited %d", argv, pod.meta.get("namespace"), pod.meta.get("name"), code
    )
