"""A kubeconfig's inline private key is on disk only while the client is built.

Before: kubernetes_asyncio wrote ``client-key-data`` to ``/tmp/tmpXXXXXXXX`` and removed it
only at a normal interpreter exit: ``edgehub manager`` or the agent killed with SIGKILL left the
key behind, and each suite run left about ten of them.
"""

from __future__ import annotations

import base64
import os
import pathlib
import tempfile

import pytest
import yaml
from kubernetes_asyncio.config import kube_config

from kubecontrol import kubeapi, scratchfiles
from yurthub.testing import simapiserver


def _files_holding(needle: bytes, directory: str) -> list[str]:
    found = []
    for root, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as f:
                    if needle in f.read(1 << 20):
                        found.append(path)
            except OSError:
                continue
    return found


@pytest.fixture
def private_tmp(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A temporary directory of this test's own (``TMPDIR``), so that only its files are seen."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return str(directory)


async def test_the_inline_key_is_gone_once_the_client_is_made_and_the_client_works(
    tmp_path: pathlib.Path, private_tmp: str
) -> None:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim:
        path = sim.write_kubeconfig(
            tmp_path / "admin.kubeconfig",
            user=simapiserver.ADMIN_USER,
            groups=simapiserver.ADMIN_GROUPS,
        )
        text = path.read_bytes()
        inline = yaml.safe_load(text)["users"][0]["user"]["client-key-data"]
        key = base64.standard_b64decode(inline)
        for _ in range(2):  # the second load must not be handed the first one's removed file
            client = await kubeapi.connect(None, path, "kubeconfig-key-test/0")
            try:
                assert _files_holding(key, private_tmp) == []
                assert [
                    n for n in os.listdir(private_tmp) if n.startswith(scratchfiles.PREFIX)
                ] == []
                assert not [
                    name
                    for name in kube_config._temp_files.values()
                    if name.startswith(private_tmp)
                ]
                # The TLS context holds the key: the apiserver takes the client's certificate
                # (a client without one is answered 401, a KubeError).
                api = kubeapi.KubeApi(client, request_timeout=5.0)
                await api.list(kubeapi.NODES)
            finally:
                await client.close()
