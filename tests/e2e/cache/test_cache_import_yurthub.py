"""``edgehub cache import-yurthub``: an OpenYurt node's YurtHub cache (a file per object) read
into edgehub's, in the same directory as on a migrated node; the hub then started with the
cloud away answers kubelet and kube-proxy from it as YurtHub would have, and YurtHub's files
are left as they were (rolling back finds them)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pathlib
import subprocess
import sys
from typing import Any

import aiohttp
import pytest

from yurthub.cache import keys, sealing, store, yurthubfiles
from yurthub.testing import ports

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "edge-1"


def _write(root: pathlib.Path, relative: str, obj: Any) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))


def _pod(name: str, namespace: str, rv: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    }


def yurthub_tree(root: pathlib.Path) -> None:
    """What YurtHub leaves on a node (reference §1.4), a few things it should not hold too."""
    _write(root, "kubelet/pods.v1.core/default/web-1", _pod("web-1", "default", 101))
    _write(root, "kubelet/pods.v1.core/kube-system/proxy-x", _pod("proxy-x", "kube-system", 99))
    _write(root, f"kubelet/nodes.v1.core/{NODE}", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "resourceVersion": "50"},
    })  # fmt: skip
    _write(root, "kubelet/configmaps.v1.core/default/settings", {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default", "resourceVersion": "7"},
        "data": {"a": "b"},
    })  # fmt: skip
    _write(root, "kube-proxy/services.v1.core/default/kubernetes", {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "resourceVersion": "5"},
        "spec": {"clusterIP": "10.96.0.1"},
    })  # fmt: skip
    _write(root, "kubelet/leases.v1.coordination.k8s.io/kube-node-lease/" + NODE, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NODE, "namespace": "kube-node-lease", "resourceVersion": "60"},
    })  # fmt: skip
    _write(root, "version", {"major": "1", "minor": "30", "gitVersion": "v1.30.2"})
    _write(root, "_internal/restmapper/cache-crd-restmapper.conf", "{}")
    _write(root, "kubelet/pods/default/legacy", _pod("legacy", "default", 1))
    _write(root, "kubelet/pods.v1.core/default/torn", '{"apiVersion": ')
    _write(root, "kubelet/pods.v1.core/default/renamed", _pod("other", "default", 3))
    _write(root, ".imported-from-yurthub", "{}")  # edgehub's, from an earlier hub start


def _digest(root: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("cache.db")
    }


@pytest.mark.parametrize(
    ("relative", "scope", "namespace", "name"),
    [
        ("kubelet/pods.v1.core/default/p", ("kubelet", "pods", "v1", ""), "default", "p"),
        ("kubelet/nodes.v1.core/n", ("kubelet", "nodes", "v1", ""), "", "n"),
        ("k/leases.v1.coordination.k8s.io/ns/l", ("k", "leases", "v1", "coordination.k8s.io"),
         "ns", "l"),
        ("c/foos.v1alpha1.bars.extension.io/kube-system/foobar",
         ("c", "foos", "v1alpha1", "bars.extension.io"), "kube-system", "foobar"),
        ("kubelet/namespaces.v1.core/default", ("kubelet", "namespaces", "v1", ""), "", "default"),
        # kubemark's hollow kubelet is kubelet to this hub (requestinfo.COMPONENT_ALIASES).
        ("hollow-kubelet/pods.v1.core/ns/p", ("kubelet", "pods", "v1", ""), "ns", "p"),
    ],
)  # fmt: skip
def test_yurthub_paths(
    relative: str, scope: tuple[str, str, str, str], namespace: str, name: str
) -> None:
    assert yurthubfiles.parse(tuple(relative.split("/"))) == yurthubfiles.Located(
        keys.Scope(*scope), namespace, name
    )


@pytest.mark.parametrize(
    "relative",
    [
        "kubelet/pods/default/legacy",  # legacy layout
        "_internal/restmapper/cache-crd-restmapper.conf",
        "kubelet/partialobjectmetadatas.v1.meta.k8s.io/x/y",
        "kubelet/pods.v1.core/default/.tmp-p",
        "kubelet/namespaces.v1.core/x/y",
        "version",
        "a/b/c/d/e",
    ],
)
def test_what_is_not_imported(relative: str) -> None:
    assert yurthubfiles.parse(tuple(relative.split("/"))) is None


@pytest.mark.slow
async def test_a_migrated_node_answers_offline_from_yurthubs_files(
    tmp_path: pathlib.Path,
) -> None:
    cache = tmp_path / "etc-kubernetes-cache"  # the same directory for both, as on a node
    yurthub_tree(cache)
    before = _digest(cache)
    done = subprocess.run(
        [EDGEHUB, "cache", "import-yurthub", f"--from={cache}", f"--disk-cache-path={cache}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported 6 objects and 5 lists of kube-proxy, kubelet")
    for why in ("legacy: not an object file", "torn: not JSON", "renamed: names 'other'"):
        assert why in done.stdout, done.stdout
    assert ".imported-from-yurthub" not in done.stdout  # edgehub's own file, not YurtHub's
    assert _digest(cache) == before  # YurtHub's files untouched: rolling back finds them

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://x'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    proc = await asyncio.create_subprocess_exec(
        EDGEHUB, "hub", f"--server-addr=https://127.0.0.1:{ports.closed_port()}",
        f"--node-name={NODE}", f"--kubeconfig={kubeconfig}", "--allow-system-trust-store",
        f"--disk-cache-path={cache}", "--proxy-port=0", "--serve-port=0",
        "--proxy-secure-port=0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(20):
            line = (await proc.stdout.readline()).decode()
        fields = dict(p.split("=", 1) for p in line.split()[1:])
        proxy = fields["proxy"]
        kubelet = {"User-Agent": "kubelet/v1.30.2", "Accept": "application/json"}
        async with aiohttp.ClientSession() as s:
            async with s.get(fields["server"] + "/v1/readyz") as r:
                assert r.status == 200, await r.text()  # offline, but it has lists to answer
            async with s.get(
                proxy + "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={NODE}"},
                headers=kubelet,
            ) as r:  # fmt: skip
                assert r.status == 200, await r.text()
                pods = await r.json()
            assert sorted(p["metadata"]["name"] for p in pods["items"]) == ["proxy-x", "web-1"]
            assert pods["metadata"]["resourceVersion"] == "101"
            async with s.get(proxy + f"/api/v1/nodes/{NODE}", headers=kubelet) as r:
                assert r.status == 200
            async with s.get(
                proxy + "/api/v1/namespaces/default/configmaps/settings", headers=kubelet
            ) as r:
                assert (await r.json())["data"] == {"a": "b"}
            async with s.get(
                proxy + "/api/v1/services",
                headers={"User-Agent": "kube-proxy/v1.30.2", "Accept": "application/json"},
            ) as r:
                assert [i["metadata"]["name"] for i in (await r.json())["items"]] == ["kubernetes"]
            async with s.get(proxy + "/version", headers=kubelet) as r:
                assert (await r.json())["gitVersion"] == "v1.30.2"
            async with s.get(proxy + "/api/v1/secrets", headers=kubelet) as r:
                assert r.status == 404
                assert "never listed while online" in (await r.json())["message"]
    finally:
        proc.terminate()
        await proc.wait()


async def test_an_import_is_sealed_as_the_hub_will_open_it(tmp_path: pathlib.Path) -> None:
    cache = tmp_path / "etc-kubernetes-cache"
    yurthub_tree(cache)
    kek = tmp_path / "kek"
    kek.write_bytes(bytes(range(32)))
    kek.chmod(0o600)
    done = subprocess.run(
        [EDGEHUB, "cache", "import-yurthub", f"--from={cache}", f"--disk-cache-path={cache}",
         f"--cache-key-file={kek}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with pytest.raises(store.StoreError, match="is sealed"):
        await store.Store.open(cache)
    opened = await store.Store.open(cache, key_source=sealing.Source(sealing.Kind.KEYFILE, kek))
    try:
        assert len(opened) == 6 and opened.sealer.sealing
    finally:
        await opened.close()
