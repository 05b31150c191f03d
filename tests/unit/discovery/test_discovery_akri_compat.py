"""Pure pieces of interoperating with Akri's own binaries: naming a peer that resets our
streams, and a handler socket that is not there yet."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from discovery import admission, registry, wire


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        # grpcio 1.7x/1.8x's words for h2 resetting a request it finds malformed:
        ("Stream removed (RST_STREAM (Received RST_STREAM with error code 1))", "PROTOCOL_ERROR"),
        ("Received RST_STREAM with error code 1", "PROTOCOL_ERROR"),
        ("Received RST_STREAM with error code 7", "REFUSED_STREAM"),
        ("stream terminated by RST_STREAM with error code: PROTOCOL_ERROR (1)", None),
        ("Received RST_STREAM with error code 99", "error code 99"),
        ("failed to connect to all addresses", None),
        ("", None),
        (None, None),
    ],
)
def test_reset_error(details: str | None, expected: str | None) -> None:
    assert wire.reset_error(details) == expected


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (
            "INTERNAL",
            "Received RST_STREAM with error code 1",
            "handler at /a.sock reset the stream (PROTOCOL_ERROR): INTERNAL: "
            "Received RST_STREAM with error code 1",
        ),
        (
            "UNAVAILABLE",
            "Socket closed",
            "handler at /a.sock failed the call: UNAVAILABLE: Socket closed",
        ),
        ("UNKNOWN", None, "handler at /a.sock failed the call: UNKNOWN: no details"),
    ],
)
def test_describe_failure(code: str, details: str | None, expected: str) -> None:
    assert wire.describe_failure("handler at /a.sock", code, details) == expected


def test_check_socket_tells_missing_from_wrong(tmp_path: Path) -> None:
    assert registry.check_socket(str(tmp_path / "missing.sock")) is False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(tmp_path / "real.sock"))
        assert registry.check_socket(str(tmp_path / "real.sock")) is True
    (tmp_path / "file").write_text("")
    with pytest.raises(admission.Refused, match="is not a Unix socket"):
        registry.check_socket(str(tmp_path / "file"))
