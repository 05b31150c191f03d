"""The cache's key sealed to a TPM 2.0: ``swtpm`` (a software TPM) driven by ``tpm2-tools``.

Each test starts its own ``swtpm`` processes on free loopback ports (Debian's ``swtpm`` and
``tpm2-tools``; ``make test`` installs them): a round trip and restart on one TPM, and the same
cache directory taken to another TPM, where nothing opens and a fresh sealed cache starts.
"""

from __future__ import annotations

import contextlib
import pathlib
import socket
import stat
import subprocess
import time
from collections.abc import Iterator

import orjson
import pytest

from yurthub.cache import keys, sealing, store, tpmsealing

POD = keys.Scope("kubelet", "pods", "v1")


def _free_ports() -> int:
    """A free port whose next one is free too (the swtpm TCTI finds the control port there)."""
    while True:
        with socket.socket() as s, socket.socket() as t:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            with contextlib.suppress(OSError):
                t.bind(("127.0.0.1", port + 1))
                return port


@contextlib.contextmanager
def swtpm(state: pathlib.Path) -> Iterator[str]:
    """A software TPM with its state in ``state``; yields its TCTI."""
    state.mkdir(parents=True, exist_ok=True)
    port = _free_ports()
    ctrl = port + 1
    proc = subprocess.Popen(
        ["swtpm", "socket", "--tpm2",
         "--server", f"type=tcp,port={port},bindaddr=127.0.0.1",
         "--ctrl", f"type=tcp,port={ctrl},bindaddr=127.0.0.1",
         "--tpmstate", f"dir={state}", "--flags", "not-need-init,startup-clear"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:  # until it accepts connections (bounded)
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert time.monotonic() < deadline, "swtpm did not listen"
            time.sleep(0.02)
        yield f"swtpm:host=127.0.0.1,port={port}"
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


async def _fill(
    path: pathlib.Path, source: sealing.Source, environ: dict[str, str] | None = None
) -> store.Store:
    s = await store.Store.open(path, key_source=source, environ=environ)
    items = [{"metadata": {"name": f"p{i}", "namespace": "default", "resourceVersion": "1"}}
             for i in range(3)]  # fmt: skip
    body = orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
    assert s.submit(store.PutList(keys.list_key(POD, "", "", ""), body))
    assert await s.flush(5)
    return s


async def test_a_tpm_sealed_cache_round_trips_and_restarts(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache"
    with swtpm(tmp_path / "tpm") as tcti:
        source = sealing.Source(sealing.Kind.TPM, tcti=tcti)
        s = await _fill(path, source)
        assert s.sealer.sealing and s.sealed_by == f"TPM at {tcti}"
        await s.close()
        for name in (tpmsealing.PUBLIC, tpmsealing.PRIVATE):
            assert stat.S_IMODE((path / name).stat().st_mode) == 0o600
        reopened = await store.Store.open(path, key_source=source)
        try:
            assert len(reopened) == 3 and reopened.reset == ""
            assert await reopened.body(keys.ObjectKey(POD, "default", "p1")) is not None
        finally:
            await reopened.close()


async def test_another_tpm_opens_nothing_and_starts_a_fresh_sealed_cache(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "cache"
    with swtpm(tmp_path / "tpm-a") as tcti:
        await (await _fill(path, sealing.Source(sealing.Kind.TPM, tcti=tcti))).close()
    with swtpm(tmp_path / "tpm-b") as other:
        source = sealing.Source(sealing.Kind.TPM, tcti=other)
        moved = await store.Store.open(path, key_source=source)
        try:
            assert len(moved) == 0 and moved.sealer.sealing
            assert "does not unseal on this node" in moved.reset
        finally:
            await moved.close()
        # The fresh cache is this TPM's: it reopens with its key.
        s = await _fill(path, source)
        await s.close()
        again = await store.Store.open(path, key_source=source)
        try:
            assert len(again) == 3 and again.reset == ""
        finally:
            await again.close()


async def test_auto_passes_over_a_tpm_that_does_not_answer_until_one_seals_the_key(
    tmp_path: pathlib.Path,
) -> None:
    key_file = tmp_path / "kek"
    key_file.write_bytes(bytes(range(32)))
    key_file.chmod(0o600)
    auto = sealing.Source(sealing.Kind.AUTO, key_file)
    dead = {"TPM2TOOLS_TCTI": f"swtpm:host=127.0.0.1,port={_free_ports()}"}
    s = await store.Store.open(tmp_path / "cache", key_source=auto, environ=dead)
    try:
        assert s.sealed_by == f"key file {key_file}"
    finally:
        await s.close()
    # A cache whose key a TPM sealed never falls over to another source when the TPM fails.
    with swtpm(tmp_path / "tpm") as tcti:
        tpm_cache = tmp_path / "tpm-cache"
        await (
            await _fill(tpm_cache, sealing.Source(sealing.Kind.AUTO), {"TPM2TOOLS_TCTI": tcti})
        ).close()
    with pytest.raises(store.StoreError, match="cannot seal the cache"):
        await store.Store.open(tpm_cache, key_source=auto, environ=dead)
