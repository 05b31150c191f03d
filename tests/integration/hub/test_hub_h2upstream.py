"""The hub's HTTP/2 watches (``proxy/h2upstream.py``) against an HTTP/2 server that misbehaves
on demand (``h2fakes``): many streams on one connection, the server's stream limit, GOAWAY, a
reset, a dropped or silent connection, a consumer gone or slow, a server without h2."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import ssl
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
import yarl
from h2fakes import H2Server

from yurthub.proxy import h2upstream
from yurthub.testing import ports

pytestmark = pytest.mark.usefixtures("no_leftover_tasks")

WATCH = "/api/v1/namespaces/default/configmaps?watch=true&fieldSelector=metadata.name%3Dc{}"


@pytest.fixture
async def server(tmp_path: pathlib.Path) -> AsyncIterator[H2Server]:
    async with H2Server(tmp_path / "tls") as s:
        yield s


@contextlib.asynccontextmanager
async def pooled(**kwargs: Any) -> AsyncIterator[h2upstream.Pool]:
    p = h2upstream.Pool(**kwargs)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
async def pool() -> AsyncIterator[h2upstream.Pool]:
    async with pooled() as p:
        yield p


async def watch(
    pool: h2upstream.Pool, server: H2Server, n: int, context: object = None
) -> h2upstream.Response:
    ctx = context or server.client_context()
    return await pool.request(
        server.url,
        ctx,  # type: ignore[arg-type]
        "GET",
        yarl.URL(server.url + WATCH.format(n), encoded=True),
        [("Accept", "application/json"), ("User-Agent", "kubelet"), ("Connection", "close")],
        connect_timeout=5.0,
    )


async def read(response: h2upstream.Response) -> bytes:
    return await anext(response.content.iter_any())


async def test_many_watches_share_one_connection_and_each_gets_its_own_events(
    server: H2Server, pool: h2upstream.Pool
) -> None:
    ctx = server.client_context()
    # Arriving together (as after a heal): one handshake for all of them.
    responses = await asyncio.gather(*(watch(pool, server, n, ctx) for n in range(20)))
    assert len(server.conns) == 1 and pool.connections() == 1 and pool.opened == 1
    assert {r.status for r in responses} == {200}
    assert responses[0].reason == "OK"
    assert responses[0].headers["Content-Type"] == "application/json"
    first = server.requests[0]
    assert first.headers[":authority"] == yarl.URL(server.url).raw_authority
    assert first.headers["user-agent"] == "kubelet" and "connection" not in first.headers
    by_path = {r.path: r for r in server.requests}
    for n in range(len(responses)):
        server.send(by_path[WATCH.format(n)], b'{"type":"ADDED","n":%d}\n' % n)
    for n, response in enumerate(responses):
        assert await read(response) == b'{"type":"ADDED","n":%d}\n' % n
    server.end(by_path[WATCH.format(3)])
    with pytest.raises(StopAsyncIteration):
        await read(responses[3])
    assert responses[3].content.is_eof()


async def test_the_servers_stream_limit_opens_more_connections(tmp_path: pathlib.Path) -> None:
    async with H2Server(tmp_path / "tls", max_streams=4) as server, pooled() as pool:
        ctx = server.client_context()
        first = await watch(pool, server, 0, ctx)  # the server's SETTINGS are known now
        rest = [await watch(pool, server, n, ctx) for n in range(1, 10)]
        assert len(server.conns) == 3 and pool.connections() == 3
        assert all(r.status == 200 for r in [first, *rest])


async def test_a_consumer_gone_resets_its_stream_only(
    server: H2Server, pool: h2upstream.Pool
) -> None:
    ctx = server.client_context()
    gone, kept = await watch(pool, server, 0, ctx), await watch(pool, server, 1, ctx)
    gone.release()
    await server.until(lambda: server.requests[0].reset is not None)
    assert server.requests[0].reset == h2.errors.ErrorCodes.CANCEL
    server.send(server.requests[1], b"still here\n")
    assert await read(kept) == b"still here\n"
    assert pool.connections() == 1


async def test_a_reset_or_a_dropped_connection_ends_the_watch_as_a_broken_body(
    server: H2Server, pool: h2upstream.Pool
) -> None:
    ctx = server.client_context()
    reset, other = await watch(pool, server, 0, ctx), await watch(pool, server, 1, ctx)
    server.reset(server.requests[0])
    with pytest.raises(h2upstream.aiohttp.ServerDisconnectedError):
        await read(reset)
    server.drop(0)
    with pytest.raises(h2upstream.aiohttp.ServerDisconnectedError):
        await read(other)
    assert pool.connections() == 0
    again = await watch(pool, server, 2, ctx)  # a new connection for the next watch
    assert again.status == 200 and len(server.conns) == 2


async def test_goaway_ends_the_connection_and_the_next_watch_takes_a_new_one(
    server: H2Server, pool: h2upstream.Pool
) -> None:
    ctx = server.client_context()
    taken = await watch(pool, server, 0, ctx)
    server.silent = True  # it reads the next request but takes it no further
    async with asyncio.TaskGroup() as tg:
        untaken = tg.create_task(outcome(watch(pool, server, 1, ctx)), name="a watch not taken")
        await asyncio.sleep(0.2)  # the second request crosses loopback: nothing to wait on
        server.silent = False
        server.goaway(0, last_stream_id=server.requests[0].stream_id)
    failed = untaken.result()
    assert isinstance(failed, h2upstream.H2Unavailable) and failed.retryable
    # The stream the server took ends as a broken watch (its client watches again).
    with pytest.raises(h2upstream.aiohttp.ServerDisconnectedError, match="going away"):
        await read(taken)
    later = await watch(pool, server, 2, ctx)
    assert later.status == 200 and server.requests[-1].conn == 1


async def outcome(awaitable: Awaitable[h2upstream.Response]) -> object:
    try:
        return await awaitable
    except Exception as e:
        return e


async def test_a_silent_connection_is_pinged_and_given_up(
    server: H2Server, pool: h2upstream.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(h2upstream, "READ_IDLE", 0.3)
    monkeypatch.setattr(h2upstream, "PING_TIMEOUT", 0.3)
    response = await watch(pool, server, 0)
    server.silent = True  # a blackholed link: no frame comes back, not even the ping's answer
    with pytest.raises(h2upstream.aiohttp.ServerDisconnectedError, match="ping"):
        async with asyncio.timeout(10):
            await read(response)
    assert pool.connections() == 0


async def test_a_slow_consumer_holds_back_its_own_stream_only(
    server: H2Server, pool: h2upstream.Pool
) -> None:
    ctx = server.client_context()
    slow, quick = await watch(pool, server, 0, ctx), await watch(pool, server, 1, ctx)
    slow_request, quick_request = server.requests
    server.send(slow_request, b"x" * (3 * h2upstream.STREAM_WINDOW))
    await server.until(lambda: 0 < server.unsent(slow_request) <= 2 * h2upstream.STREAM_WINDOW)
    server.send(quick_request, b"event\n")
    assert await read(quick) == b"event\n"
    received = 0
    while received < 3 * h2upstream.STREAM_WINDOW:  # taking it opens the window again
        received += len(await read(slow))
    assert received == 3 * h2upstream.STREAM_WINDOW and server.unsent(slow_request) == 0


async def test_a_server_without_h2_is_told_apart_and_remembered(tmp_path: pathlib.Path) -> None:
    now = [0.0]
    async with (
        H2Server(tmp_path / "tls", alpn=("http/1.1",)) as server,
        pooled(clock=lambda: now[0]) as pool,
    ):
        assert pool.speaks_h2(server.url)
        with pytest.raises(h2upstream.NotH2):
            await watch(pool, server, 0)
        assert not pool.speaks_h2(server.url) and pool.connections() == 0
        now[0] += h2upstream.NO_H2_FOR
        assert pool.speaks_h2(server.url)  # asked again after a while (an upgrade)
    assert not h2upstream.Pool().speaks_h2("http://127.0.0.1:1")


async def test_a_retired_context_takes_no_new_streams_and_closes_after_its_last(
    server: H2Server, pool: h2upstream.Pool
) -> None:
    old, new = server.client_context(), server.client_context()
    before = await watch(pool, server, 0, old)
    pool.retire(old)
    after = await watch(pool, server, 1, new)
    assert after.status == 200 and len(server.conns) == 2
    before.release()
    await server.until(lambda: pool.connections() == 1)


async def test_a_connect_that_fails_fails_every_waiter_retryable(
    server: H2Server, pool: h2upstream.Pool
) -> None:
    dead = f"https://127.0.0.1:{ports.closed_port()}"
    ctx = server.client_context()
    results = await asyncio.gather(
        *(
            pool.request(dead, ctx, "GET", yarl.URL(dead + "/api"), [], connect_timeout=5.0)
            for _ in range(3)
        ),
        return_exceptions=True,
    )
    assert all(isinstance(r, h2upstream.H2Unavailable) and r.retryable for r in results)


def test_request_headers_drop_what_http2_forbids() -> None:
    url = yarl.URL("https://10.0.0.1:6443/api/v1/pods?watch=1&a=%2F", encoded=True)
    block = h2upstream.request_headers(
        "GET",
        url,
        [
            ("Host", "x"),
            ("Connection", "keep-alive"),
            ("Keep-Alive", "5"),
            ("Transfer-Encoding", "chunked"),
            ("Upgrade", "h2c"),
            ("TE", "gzip"),
            ("Accept", "application/vnd.kubernetes.protobuf"),
            ("Authorization", "Bearer t"),
        ],
    )
    assert block == [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"10.0.0.1:6443"),
        (b":path", b"/api/v1/pods?watch=1&a=%2F"),
        (b"accept", b"application/vnd.kubernetes.protobuf"),
        (b"authorization", b"Bearer t"),
    ]
    te = h2upstream.request_headers("GET", url, [("TE", "trailers")])
    assert te[-1] == (b"te", b"trailers")


def test_a_response_head_and_its_reason() -> None:
    status, headers = h2upstream.response_head(
        [
            (b":status", b"410"),
            (b"content-type", b"application/json"),
            (b"x-a", b"1"),
            (b"x-a", b"2"),
        ]
    )
    assert status == 410 and headers.getall("X-A") == ["1", "2"]
    assert h2upstream.reason(410) == "Gone" and h2upstream.reason(599) == ""
    assert h2upstream.response_head([(b":status", b"oops")])[0] == 0


async def test_what_a_consumer_left_unread_is_handed_back_to_the_connection(
    server: H2Server, pool: h2upstream.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small windows: eight streams of 256 KiB, each dropped unread (a client gone, a hub
    # ending its watch), are twice the connection's window; had their bytes not been handed
    # back, the ninth stream would get nothing.
    monkeypatch.setattr(h2upstream, "STREAM_WINDOW", 256 << 10)
    monkeypatch.setattr(h2upstream, "CONNECTION_WINDOW", 1 << 20)
    ctx = server.client_context()
    for n in range(8):
        dropped = await watch(pool, server, n, ctx)
        server.send(server.requests[-1], b"y" * (256 << 10))
        server.end(server.requests[-1])
        await server.until(lambda: server.unsent(server.requests[-1]) == 0)
        if n % 2:
            assert len(await read(dropped)) > 0  # half of them read a little first
        dropped.release()
    last = await watch(pool, server, 8, ctx)
    server.send(server.requests[-1], b"through\n")
    async with asyncio.timeout(10):
        assert await read(last) == b"through\n"
    assert len(server.conns) == 1


async def test_streams_the_hub_reset_count_against_their_connection_for_a_moment(
    server: H2Server, pool: h2upstream.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process opening and dropping watches in a loop must not make the hub start streams on
    # one connection faster than the apiserver's handlers end (Go's server would close it,
    # and every other watch on it with it): a reset stream holds its slot for RESET_GRACE.
    monkeypatch.setattr(h2upstream, "MAX_STREAMS", 4)
    monkeypatch.setattr(h2upstream, "RESET_GRACE", 0.3)
    ctx = server.client_context()
    first = [await watch(pool, server, n, ctx) for n in range(4)]
    for response in first[:2]:
        response.release()
    await watch(pool, server, 4, ctx)
    assert server.requests[-1].conn == 1  # two open, two just reset: the first one is full
    await asyncio.sleep(0.45)  # past the grace (a timed rule: nothing else to wait on)
    await watch(pool, server, 5, ctx)
    assert server.requests[-1].conn == 0 and len(server.conns) == 2  # its slots are free again


class _Wire(asyncio.Transport):
    """A transport that keeps what is written (the client's bytes, in order)."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


async def test_what_the_server_sent_before_our_preface_is_read_after_it() -> None:
    # With TLS 1.2 a server's SETTINGS can arrive in the same read as the end of the
    # handshake, before the pool has checked ALPN and started the connection: answering it then
    # (its SETTINGS ACK) would come before the client's preface, which a server refuses.
    server = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=False, header_encoding=None)
    )
    server.initiate_connection()
    conn = h2upstream._Connection(h2upstream.Pool(), ("https://x", 0), ssl.create_default_context())
    wire = _Wire()
    conn.connection_made(wire)
    conn.data_received(server.data_to_send())
    assert wire.written == b""
    conn.start()
    try:
        assert bytes(wire.written).startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        events = server.receive_data(bytes(wire.written))  # a preface, settings, their ACK
        assert any(isinstance(e, h2.events.SettingsAcknowledged) for e in events)
    finally:
        conn.fail("test over")
