"""The sealed cache on the real control plane (issue 25 item 1): a hub whose data key is sealed
to a TPM (``swtpm``, started here) caches what a kubemark hollow kubelet reads, its Secret and
ConfigMap among it, with no byte of their values on disk in the clear; cut off and restarted,
the hub answers the kubelet's pod list from its sealed cache; the cache directory copied to a
machine with another TPM reads nothing there.
"""

from __future__ import annotations

import base64
import json
import pathlib
import secrets
import shutil

import pytest
from test_edge_autonomy import offline_protobuf_pods

from tests.integration.cache.swtpms import swtpm
from yurthub.cache import keysealing, sealing, store, tpmsealing
from yurthub.testing import edgenodes, realcluster

pytestmark = pytest.mark.slow

NS = "sealed"
NAME = "sealed-1"


def _pod(node: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "app", "namespace": NS},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/config"},
                        {"name": "secret", "mountPath": "/secret"},
                    ],
                }
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": "app-config"}},
                {"name": "secret", "secret": {"secretName": "app-secret"}},
            ],
        },
    }


def _leaks(directory: pathlib.Path, needles: list[bytes]) -> list[str]:
    files = [p for p in directory.rglob("*") if p.is_file()]
    assert files
    return [f"{f.name}: {n[:8]!r}" for f in files for n in needles if n in f.read_bytes()]


async def test_a_tpm_sealed_cache_answers_after_an_offline_restart_and_nowhere_else(
    real_cluster: realcluster.RealCluster, hub_rbac: None, tmp_path: pathlib.Path
) -> None:
    cluster = real_cluster
    secret, config = f"secret-{secrets.token_hex(16)}", f"config-{secrets.token_hex(16)}"
    with swtpm(tmp_path / "tpm") as tcti:
        node = edgenodes.EdgeNode(
            cluster, NAME, workdir=tmp_path / NAME, cache_key_source=f"tpm:{tcti}"
        )
        node.start()
        try:
            assert (node.cache_dir / tpmsealing.PRIVATE).exists()
            cluster.kubectl("create", "namespace", NS)
            cluster.kubectl(
                "create", "configmap", "app-config", "-n", NS, f"--from-literal=v={config}"
            )
            cluster.kubectl(
                "create", "secret", "generic", "app-secret", "-n", NS, f"--from-literal=v={secret}"
            )
            cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod(NAME)))
            uid = edgenodes.eventually(
                lambda: (node.running_pods() or {}).get(f"{NS}/app"),
                90,
                "the pod running on the hollow kubelet",
                alive=node.check_alive,
            )
            # kubelet read the Secret and the ConfigMap through the hub: cached, sealed.
            edgenodes.eventually(
                lambda: (
                    node.cached(f"kubelet/secrets.v1.core/{NS}/")
                    and node.cached(f"kubelet/configmaps.v1.core/{NS}/")
                ),
                60,
                "kubelet's Secret and ConfigMap in the hub's cache",
            )
            needles = [value.encode() for value in (secret, config)] + [
                base64.b64encode(value.encode())[:24] for value in (secret, config)
            ]
            assert _leaks(node.cache_dir, needles) == []

            node.cut()
            node.wait_cloud(healthy=False, timeout=40)
            node.restart_hub()  # ready offline: it answers from its sealed cache
            listed = offline_protobuf_pods(node)
            assert [str(p["metadata"]["uid"]) for p in listed] == [uid]  # type: ignore[index]
            assert node.running_pods() == {f"{NS}/app": uid}
        finally:
            node.stop()
            cluster.kubectl("delete", "node", NAME, "--wait=false", check=False)
    assert _leaks(node.cache_dir, needles) == []

    copy = tmp_path / "copy"
    shutil.copytree(node.cache_dir, copy)
    with swtpm(tmp_path / "other-tpm") as other:
        source = sealing.Source(sealing.Kind.TPM, tcti=other)
        opened = await store.Store.open(copy, key_source=source)
        try:
            assert len(opened) == 0 and opened.list_records() == []
            assert "does not unseal on this node" in opened.reset
        finally:
            await opened.close()
        # Only a new, empty cache is sealed to this TPM; the copy's key stays unopened.
        assert keysealing.has_ring(copy)
