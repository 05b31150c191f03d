"""``edgehub static-pod-upgrade`` as a worker Pod runs it: a real staticPodPath in a temp
directory, the ConfigMap as mounted files, and a fake hub answering readiness on loopback.
Ready -> the new manifest is in place and the old one kept hidden; never ready (or only the
old hub ready) -> the old manifest is back, exit 1 with one line; a second run is a no-op."""

from __future__ import annotations

import contextlib
import datetime
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import yaml

HASH = "openyurt.io/static-pod-hash"


def manifest(digest: str, image: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "edgehub-hub",
                "namespace": "kube-system",
                "annotations": {HASH: digest},
            },
            "spec": {"containers": [{"name": "hub", "image": image}]},
        }
    )


@contextlib.contextmanager
def fake_hub(readyz: int, started: str) -> Iterator[str]:
    """A hub's /v1/readyz (``readyz``) and /v1/status (``started``: "now" answers with the
    time of the request, as a hub that has just started; otherwise that timestamp)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/v1/readyz":
                code, body = readyz, b"ok" if readyz == 200 else b"not ready"
            elif self.path == "/v1/status":
                stamp = started
                if started == "now":
                    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                code, body = 200, json.dumps({"startedAt": stamp}).encode()
            else:
                code, body = 404, b""
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="fake hub", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def fake_yurthub(down_after: int | None) -> Iterator[str]:
    """YurtHub's /v1/readyz with no /v1/status (404): 200, then (``down_after`` probes in, as
    kubelet swaps the process) 503 twice, then 200 again; ``None``: always 200 (the old YurtHub
    never went away)."""
    probes = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = 404
            if self.path == "/v1/readyz":
                probes[0] += 1
                down = down_after is not None and down_after < probes[0] <= down_after + 2
                code = 503 if down else 200
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="fake yurthub", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def node(tmp_path: Path, new_hash: str = "new") -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    manifests = tmp_path / "manifests"
    data = tmp_path / "data"
    manifests.mkdir()
    data.mkdir()
    (manifests / "edgehub-hub.yaml").write_text(manifest("old", "edgehub:1"))
    (manifests / "kube-proxy.yaml").write_text("untouched\n")
    (data / "edgehub-hub").write_text(manifest(new_hash, "edgehub:2"))
    return manifests, data


def upgrade(
    manifests: Path, data: Path, hub: str, *extra: str, want: str = "new"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "edgehub", "static-pod-upgrade",
            "--name=hub-edge-1", "--namespace=kube-system", "--manifest=edgehub-hub",
            f"--hash={want}", "--mode=auto", f"--static-pod-path={manifests}",
            f"--configmap-dir={data}", f"--readyz-url={hub}/v1/readyz",
            f"--status-url={hub}/v1/status", "--poll-interval=0.05", *extra,
        ],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip


def visible(manifests: Path) -> list[str]:
    """What kubelet would load: every file not starting with a dot."""
    return sorted(p.name for p in manifests.iterdir() if not p.name.startswith("."))


def test_ready_new_hub_keeps_the_new_manifest(tmp_path: Path) -> None:
    manifests, data = node(tmp_path)
    with fake_hub(200, "now") as hub:
        done = upgrade(manifests, data, hub, "--timeout=30s")
    assert done.returncode == 0, done.stderr
    assert (manifests / "edgehub-hub.yaml").read_text() == manifest("new", "edgehub:2")
    assert (manifests / ".edgehub-hub.yaml.bak").read_text() == manifest("old", "edgehub:1")
    assert visible(manifests) == ["edgehub-hub.yaml", "kube-proxy.yaml"]
    assert (manifests / "kube-proxy.yaml").read_text() == "untouched\n"
    assert oct((manifests / "edgehub-hub.yaml").stat().st_mode & 0o777) == "0o600"
    assert "ready with hash new" in done.stderr

    # Run again (a worker started twice): nothing written, nothing waited for.
    before = (manifests / "edgehub-hub.yaml").stat().st_mtime_ns
    again = upgrade(manifests, data, "http://127.0.0.1:1", "--timeout=30s")
    assert again.returncode == 0, again.stderr
    assert "already has hash new" in again.stderr
    assert (manifests / "edgehub-hub.yaml").stat().st_mtime_ns == before


def test_never_ready_puts_the_old_manifest_back(tmp_path: Path) -> None:
    manifests, data = node(tmp_path)
    with fake_hub(503, "now") as hub:
        done = upgrade(manifests, data, hub, "--timeout=0.3s")
    assert done.returncode == 1
    assert (manifests / "edgehub-hub.yaml").read_text() == manifest("old", "edgehub:1")
    assert visible(manifests) == ["edgehub-hub.yaml", "kube-proxy.yaml"]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "not ready within 0.3 s" in lines[0], done.stderr
    assert "old manifest restored" in lines[0]


def test_the_old_hub_still_answering_is_not_the_new_one(tmp_path: Path) -> None:
    manifests, data = node(tmp_path)
    with fake_hub(200, "2020-01-01T00:00:00Z") as hub:
        done = upgrade(manifests, data, hub, "--timeout=0.3s")
    assert done.returncode == 1, done.stderr
    assert (manifests / "edgehub-hub.yaml").read_text() == manifest("old", "edgehub:1")


def test_a_hub_without_status_is_ready_once_the_old_one_went_away(tmp_path: Path) -> None:
    """A rollback to YurtHub: no /v1/status, so readiness after a failure seen is the sign."""
    manifests, data = node(tmp_path)
    with fake_yurthub(down_after=3) as hub:
        done = upgrade(manifests, data, hub, "--timeout=30s")
    assert done.returncode == 0, done.stderr
    assert (manifests / "edgehub-hub.yaml").read_text() == manifest("new", "edgehub:2")
    manifests2, data2 = node(tmp_path / "again")
    with fake_yurthub(down_after=None) as hub:  # the old one never stopped answering
        done = upgrade(manifests2, data2, hub, "--timeout=0.5s")
    assert done.returncode == 1, done.stderr
    assert (manifests2 / "edgehub-hub.yaml").read_text() == manifest("old", "edgehub:1")


def test_nothing_answering_and_no_old_manifest_removes_the_new_one(tmp_path: Path) -> None:
    manifests, data = node(tmp_path)
    (manifests / "edgehub-hub.yaml").unlink()
    done = upgrade(manifests, data, "http://127.0.0.1:1", "--timeout=0.2")
    assert done.returncode == 1
    assert visible(manifests) == ["kube-proxy.yaml"]
    assert "new manifest removed" in done.stderr


def test_a_configmap_of_another_hash_is_refused_untouched(tmp_path: Path) -> None:
    manifests, data = node(tmp_path, new_hash="newer")
    done = upgrade(manifests, data, "http://127.0.0.1:1", "--timeout=1s")
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "holds hash newer, not new" in done.stderr
    assert (manifests / "edgehub-hub.yaml").read_text() == manifest("old", "edgehub:1")
    assert not (manifests / ".edgehub-hub.yaml.bak").exists()


def test_bad_flags_exit_3_with_one_line(tmp_path: Path) -> None:
    manifests, data = node(tmp_path)
    for flag in ("--manifest=../etc/passwd", "--timeout=soon"):
        done = upgrade(manifests, data, "http://127.0.0.1:1", flag)
        assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr
    assert (manifests / "edgehub-hub.yaml").read_text() == manifest("old", "edgehub:1")
