"""Which event loop ``edgehub hub`` and ``edgehub partition`` run on (``EDGEHUB_EVENT_LOOP``)."""

from __future__ import annotations

import asyncio
import sys

import click
import pytest
import uvloop
from edgehub import cli


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


@pytest.mark.parametrize("value", [None, "", "asyncio", " AsyncIO "])
def test_the_standard_loop_is_the_default(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(cli.EVENT_LOOP_ENV, raising=False)
    else:
        monkeypatch.setenv(cli.EVENT_LOOP_ENV, value)
    assert cli.loop_factory() is None
    loop_type = cli.run(_loop_type())
    assert not issubclass(loop_type, uvloop.Loop)
    assert issubclass(loop_type, asyncio.BaseEventLoop)


def test_uvloop_is_an_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EVENT_LOOP_ENV, "uvloop")
    assert issubclass(cli.run(_loop_type()), uvloop.Loop)


def test_a_value_naming_no_loop_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EVENT_LOOP_ENV, "tokio")
    with pytest.raises(
        click.UsageError,
        match=r"EDGEHUB_EVENT_LOOP='tokio' names no event loop; use one of asyncio, uvloop",
    ):
        cli.loop_factory()


def test_uvloop_asked_for_but_missing_is_an_error_not_a_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(cli.EVENT_LOOP_ENV, "uvloop")
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    with pytest.raises(click.UsageError, match="uvloop is not installed"):
        cli.loop_factory()


def test_a_command_may_default_to_uvloop_and_the_variable_still_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # edgehub partition (a test tool relaying every byte it cuts) defaults to uvloop.
    monkeypatch.delenv(cli.EVENT_LOOP_ENV, raising=False)
    assert issubclass(cli.run(_loop_type(), default_loop="uvloop"), uvloop.Loop)
    monkeypatch.setenv(cli.EVENT_LOOP_ENV, "asyncio")
    assert cli.loop_factory("uvloop") is None


async def _tls_read_buffer() -> int:
    return int(asyncio.sslproto.SSLProtocol.max_size)


def test_the_standard_loops_tls_buffers_are_sized_for_many_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every TLS connection of the standard loop holds a read buffer of this size (CPython's
    # default: 256 KiB, zero-filled); a hub holds one a watch it forwards.
    monkeypatch.setattr(asyncio.sslproto.SSLProtocol, "max_size", 256 * 1024)
    monkeypatch.delenv(cli.EVENT_LOOP_ENV, raising=False)
    assert cli.run(_tls_read_buffer()) == cli.TLS_READ_BUFFER == 64 * 1024
