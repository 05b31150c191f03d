"""docs/migrating.md's node-side commands, run as written on a node of the real control plane
whose hub is a static Pod (a hollow kubelet, ``staticpods.Runner`` for the runtime): the
``byhand`` block moves the node from the real YurtHub v1.7.0 to edgehub, the ``import``
block runs the image's import, the ``byhand-rollback`` block puts YurtHub back.

How each line runs (the stand-ins, named):

* a shell line (``mv``, ``sed``, ``cp``, ``rm``): by ``sh``, as written, in a mount namespace
  where ``/etc/kubernetes``, ``/var/lib/yurthub`` and ``/root`` are the node's and
  ``/etc/kubernetes/manifests`` is kubelet's staticPodPath (``StaticPodNode.sh``);
* ``crictl exec $(crictl ps -q --name yurt-hub) CMD...``: CMD in the hub's container
  (``Runner.exec``: its image's program, volumes and ports);
* ``ctr image pull IMAGE``: the image must be in the test bed's image table (no container
  engine here);
* ``ctr run ... --mount type=bind,src=S,dst=D,... IMAGE ID ARGS...``: the Dockerfile's
  ENTRYPOINT followed by ARGS (docker's and nerdctl's way), and ARGS alone (a ``ctr`` that
  runs its arguments instead of the ENTRYPOINT), each as a host process with S bound at D,
  on a copy of the node's YurtHub cache taken once YurtHub stopped.

Checked: the node goes to edgehub and back to YurtHub, Ready throughout but for a hub restart;
edgehub's first start imported YurtHub's cache (it answers offline what YurtHub had cached);
``edgehub status`` in the hub's container says healthy; both forms of the import line import
YurtHub's objects; YurtHub's cache files are as YurtHub left them when it runs again.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import shlex
import shutil
import subprocess
from collections.abc import Iterator

import pytest
import rollout_support as rs
import yurthub_support

from yurthub.cache import yurthubfiles
from yurthub.testing import edgenodes, podcommands, realcluster, staticpodnodes, yurthubs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NODE = "guide-a"
POOL = "guide-pool"
APPS = "guide-apps"
GUIDE = rs.guide_blocks(rs.REPO / "docs" / "migrating.md")
KUBELET_UA = {"User-Agent": "hollow-kubelet/v1.37.2 (linux/amd64) kubernetes/guide"}
CRICTL_EXEC = "crictl exec $(crictl ps -q --name yurt-hub) "


def _get(url: str) -> tuple[int, dict[str, object]]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={**KUBELET_UA, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return int(e.code), {}
    except (OSError, ValueError):
        return 0, {}


def _yurthub_files(root: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] not in yurthubfiles.OWN_FILES
    }


@pytest.fixture
def node(
    real_cluster: realcluster.RealCluster, hub_rbac: None, tmp_path: pathlib.Path
) -> Iterator[staticpodnodes.StaticPodNode]:
    cluster = real_cluster
    for crd in ("nodepools", "nodebuckets"):
        cluster.kubectl("apply", "-f", str(rs.REPO / f"manifests/crds/{crd}.apps.openyurt.io.yaml"))
    images = rs.images(yurthub_support.path(), tmp_path / "build2")
    with rs.yurthub_caches_hollow_nodes(cluster):
        the_node = staticpodnodes.StaticPodNode(
            cluster, NODE, workdir=tmp_path / NODE, images=images,
            labels={"apps.openyurt.io/nodepool": POOL},
        )  # fmt: skip
        yurthubs.lay_out_root(cluster, the_node.path("/var/lib/yurthub"), the_node.apiserver_url,
                              NODE, ("system:nodes", "openyurt:yurthub"))  # fmt: skip
        the_node.path("/etc/kubernetes").mkdir(parents=True, exist_ok=True)
        try:
            the_node.start({"yurthub.yaml": rs.yurtadm_manifest(POOL)})
            yield the_node
        finally:
            the_node.stop()
            cluster.kubectl("delete", "node", NODE, "--wait=false", check=False)
            cluster.kubectl("delete", "namespace", APPS, "--wait=false", check=False)


def _run_import_line(
    line: str, node: staticpodnodes.StaticPodNode, copy: pathlib.Path, *, entrypoint: bool
) -> subprocess.CompletedProcess[str]:
    """A ``ctr run`` line as a host process: ENTRYPOINT + the arguments after the container's
    ID (or the arguments alone), the line's bind mounts with ``copy`` standing for their
    source (the node's directory)."""
    words = shlex.split(line)
    assert words[:2] == ["ctr", "run"], line
    mounts, rest = [], words[2:]
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag == "--mount":
            options = dict(part.split("=", 1) for part in rest.pop(0).split(","))
            assert options["type"] == "bind", options
            mounts.append(podcommands.Mount(options["dst"], copy))
    image, _container_id, *args = rest
    program = node.images[image]
    argv = [*program.entrypoint, *args] if entrypoint else args
    head = program.commands[argv[0]]
    scratch = node.workdir / f"ctr-{'entrypoint' if entrypoint else 'args'}"
    scratch.mkdir(parents=True, exist_ok=True)
    script, create = podcommands.mount_script(mounts, scratch)
    assert not create, create
    return subprocess.run(
        [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--",
         "/bin/sh", "-c", script, "sh", *head, *argv[1:]],
        capture_output=True, text=True, timeout=120, check=False, cwd="/",
        env={"PATH": "/usr/bin:/bin", **program.env},
    )  # fmt: skip


def test_the_guides_node_commands_move_a_node_to_edgehub_and_back(
    node: staticpodnodes.StaticPodNode, tmp_path: pathlib.Path
) -> None:
    cluster = node.cluster
    assert node.runner is not None
    cluster.kubectl("create", "namespace", APPS)
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": APPS},
        "spec": {"nodeName": NODE,
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    }))  # fmt: skip
    pods_url = f"{node.proxy_url}/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}"

    def app_listed() -> bool:
        status, doc = _get(pods_url)
        names = {p["metadata"]["name"] for p in doc.get("items") or []}  # type: ignore[attr-defined]
        return status == 200 and "app" in names

    edgenodes.eventually(app_listed, 120, "the app listed through YurtHub", alive=node.check_alive)
    cache = node.path("/etc/kubernetes/cache")
    edgenodes.eventually(
        lambda: any(cache.glob("hollow-kubelet/pods.v1.core/*/app")), 60,
        "YurtHub caching kubelet's pods", alive=node.check_alive,
    )  # fmt: skip

    stop_yurthub, rewrite, start_hub, status_line = GUIDE["byhand"]
    done = node.sh(stop_yurthub)
    assert done.returncode == 0, done.stderr
    edgenodes.eventually(
        lambda: node.runner.running_image("yurthub.yaml") is None, 60,  # type: ignore[union-attr]
        "YurtHub stopped", alive=node.check_alive,
    )  # fmt: skip
    left_by_yurthub = _yurthub_files(cache)

    # The import from the image, on copies of what YurtHub left (the hub will do it itself).
    pull, run = GUIDE["import"]
    assert shlex.split(pull)[:3] == ["ctr", "image", "pull"]
    assert shlex.split(pull)[3] in node.images  # the stand-in for a pulled image
    for entrypoint in (True, False):
        copy = tmp_path / f"import-{entrypoint}"
        shutil.copytree(cache, copy)
        done = _run_import_line(run, node, copy, entrypoint=entrypoint)
        assert done.returncode == 0, (entrypoint, done.stdout, done.stderr)
        assert "imported " in done.stdout and "kubelet" in done.stdout, done.stdout
        assert (copy / "cache.db").is_file()
        assert _yurthub_files(copy) == left_by_yurthub

    for line in (rewrite, start_hub):
        done = node.sh(line)
        assert done.returncode == 0, (line, done.stderr)
    manifest = node.runner.host.static_pod_path / "yurthub.yaml"
    assert "image: ghcr.io/edgehub/edgehub:0.1.0" in manifest.read_text()
    assert "    - edgehub\n    - hub\n    - --v=2\n" in manifest.read_text()
    edgenodes.eventually(
        lambda: node.runner.running_image("yurthub.yaml") == rs.EDGEHUB_1  # type: ignore[union-attr]
        and edgenodes.http("GET", f"{node.serve_url}/v1/readyz")[0] == 200,
        120, "edgehub ready", alive=node.check_alive,
    )  # fmt: skip
    node.wait_ready()
    assert status_line.startswith(CRICTL_EXEC), status_line
    code, said = node.runner.exec("yurthub.yaml", shlex.split(status_line[len(CRICTL_EXEC) :]))
    assert code == 0, said
    assert "healthy" in said and "UNHEALTHY" not in said, said  # its apiserver
    assert "kubelet" in said, said  # its cache, per component
    log = (node.workdir / "pods" / "logs" / "static-yurthub.yaml-yurt-hub.log").read_text()
    assert "imported YurtHub's cache" in log and "kubelet" in log

    # Offline, the hub answers kubelet from what it imported.
    node.cut("refuse")
    try:
        edgenodes.eventually(app_listed, 60, "edgehub answering offline", alive=node.check_alive)
    finally:
        node.heal()
    assert _yurthub_files(cache) == left_by_yurthub

    stop_hub, forget, restore = GUIDE["byhand-rollback"]
    done = node.sh(stop_hub)
    assert done.returncode == 0, done.stderr
    edgenodes.eventually(
        lambda: node.runner.running_image("yurthub.yaml") is None, 60,  # type: ignore[union-attr]
        "the hub stopped", alive=node.check_alive,
    )  # fmt: skip
    for line in (forget, restore):
        done = node.sh(line)
        assert done.returncode == 0, (line, done.stderr)
    assert not list(cache.glob("cache.db*")) and not (cache / ".imported-from-yurthub").exists()
    edgenodes.eventually(
        lambda: node.runner.running_image("yurthub.yaml") == rs.YURTHUB_IMAGE  # type: ignore[union-attr]
        and edgenodes.http("GET", f"{node.serve_url}/v1/readyz")[0] == 200,
        120, "YurtHub ready again", alive=node.check_alive,
    )  # fmt: skip
    node.wait_ready()
    edgenodes.eventually(app_listed, 60, "the app listed through YurtHub again",
                         alive=node.check_alive)  # fmt: skip
    swaps, _ = node.runner.snapshot()
    assert [s.after for s in swaps] == [rs.YURTHUB_IMAGE, rs.EDGEHUB_1, rs.YURTHUB_IMAGE]
