"""The cache's key sealed to a TPM 2.0: ``swtpm`` (a software TPM) driven by ``tpm2-tools``.

Each test starts its own ``swtpm`` processes on free loopback ports (Debian's ``swtpm`` and
``tpm2-tools``; ``make test`` installs them): a round trip and restart on one TPM, and the same
cache directory taken to another TPM, where nothing opens and a fresh sealed cache starts.
"""

from __future__ import annotations

import pathlib
import stat

import orjson
import pytest

from tests.integration.cache.swtpms import swtpm
from yurthub.cache import keys, sealing, store, tpmsealing
from yurthub.testing import ports

POD = keys.Scope("kubelet", "pods", "v1")


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
    dead = {"TPM2TOOLS_TCTI": f"swtpm:host=127.0.0.1,port={ports.Ports().pair(('127.0.0.1',))}"}
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
