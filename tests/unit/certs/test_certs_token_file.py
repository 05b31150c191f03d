"""``--join-token-file``: the certificate manager reads the token when it needs one, so it may
be written onto the node after the hub started (the chart's flow) and removed once joined."""

from __future__ import annotations

import pathlib

import pytest

from yurthub import settings
from yurthub.certs import manager, modes


def certs_for(root: pathlib.Path, token_file: pathlib.Path | None) -> manager.CertManager:
    hub = settings.HubSettings(
        node_name="edge-1",
        upstream=settings.UpstreamSettings(servers=("https://127.0.0.1:6443",)),
        certs=settings.CertSettings(
            source=modes.Source.JOIN_TOKEN, root_dir=root, join_token_file=token_file
        ),
    )
    return manager.CertManager(hub)


def test_the_file_is_read_when_needed(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "join-token"
    certs = certs_for(tmp_path, path)
    assert certs._file_token() is None  # not there yet
    path.write_text("abcdef.0123456789abcdef\n")
    token = certs._file_token()
    assert token is not None and str(token) == "abcdef.0123456789abcdef"
    path.unlink()
    assert certs._file_token() is None


def test_a_bad_file_says_which(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "join-token"
    path.write_text("nope")
    with pytest.raises(manager.NoCredentials, match=f"--join-token-file {path}: .*not of the form"):
        certs_for(tmp_path, path)._file_token()


def test_without_the_flag_there_is_no_file_token(tmp_path: pathlib.Path) -> None:
    assert certs_for(tmp_path, None)._file_token() is None
