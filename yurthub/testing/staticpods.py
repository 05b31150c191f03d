"""A node's container runtime, for what a hollow kubelet does not do: run the containers.

kubemark's hollow kubelet is the real kubelet with a fake runtime: it reads static Pod
manifests from its staticPodPath, posts their mirror Pods and runs the Pods bound to it, but
no process ever starts. ``Runner`` is the stand-in, one per node, started beside the hollow
kubelet and watching the same things it does:

* **static Pods**: every ``*.yaml`` in the node's staticPodPath (dot files ignored, as kubelet
  ignores them). A new manifest starts its containers; a changed one stops the old ones
  (SIGTERM, SIGKILL after ``terminationGracePeriodSeconds``) and then starts the new ones, as
  kubelet replaces a static Pod; a removed one stops them; a container that exits is started
  again after a pause (``restartPolicy: Always``). Each replacement is a ``Swap``, timed:
  when the change was seen, the old process gone, the new one started, and the node's hub
  first answering ``/v1/readyz`` 200 (the measured hub restart).
* **run-once API Pods** (``restartPolicy: Never``, every image in the node's table: the
  YurtStaticSet workers): taken from the hollow kubelet's own ``/pods``, so a Pod reaches the
  runner only once the node's kubelet got it through the node's hub (never while the node is
  cut off). A configMap volume is read through the node's hub, as kubelet does; the process
  runs once; its end is reported as kubelet reports it, through the node's hub: a PATCH of
  ``pods/<name>/status`` with the phase and the container's ``terminated`` state (exit code,
  times, the log's last lines as its message: ``FallbackToLogsOnError``), retried until the
  hub takes it.

What the commands are, and how a node's network and filesystem are stood in for, is
``podcommands``'. The processes get this host's PATH/HOME and the container's environment (no
other variable of the test's); their logs are under ``workdir/logs``.

Invariant: ``stop`` ends every process the runner started and removes what it created on the
host (an empty mount point directly under ``/``). The thread that calls ``start`` must live as
long as the runner (its processes die with the runner's own thread).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from yurthub.testing import podcommands, processes

log = logging.getLogger(__name__)

TICK = 0.2
POD_POLL = 0.5
RESTART_PAUSE = 2.0
READY_DEADLINE = 180.0
MESSAGE_BYTES = 2048
KUBELET_UA = "kubelet/v1.37.2 (linux/amd64) kubernetes/staticpods"


@dataclasses.dataclass(frozen=True, slots=True)
class NodeHost:
    """One node's host, as its containers see it."""

    node: str
    root: Path
    """The node's filesystem: hostPath ``/x/y`` is ``root/x/y`` (unless in ``host_paths``)."""
    static_pod_path: Path
    """kubelet's staticPodPath on this node (here: the hollow kubelet's directory)."""
    host_paths: Mapping[str, Path]
    """hostPaths that are somewhere else (``/etc/kubernetes/manifests`` -> static_pod_path)."""
    ports: Mapping[int, int]
    """The node's network: well-known port -> this node's port on the shared loopback."""
    images: Mapping[str, podcommands.Image]
    proxy_url: str
    """The node's hub proxy (how its kubelet reaches the apiserver)."""
    kubelet_url: str
    """The hollow kubelet's server (``/pods``)."""
    serve_url: str
    """The node's hub server (``/v1/readyz``: when a swapped hub is ready, for the timings)."""
    implicit_flags: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class Swap:
    manifest: str
    before: str
    """The image that ran ("" when the manifest is new)."""
    after: str
    noticed: float
    stopped: float = 0.0
    started: float = 0.0
    ready: float | None = None

    @property
    def restart_seconds(self) -> float | None:
        """From the change seen to the new hub ready."""
        return None if self.ready is None else self.ready - self.noticed


@dataclasses.dataclass(slots=True)
class Run:
    pod: str
    uid: str
    started: float
    ended: float | None = None
    exit_code: int | None = None
    reported: bool = False


@dataclasses.dataclass(slots=True)
class _Static:
    name: str
    text: str
    pod: dict[str, Any]
    procs: list[processes.Process]
    started: float
    restarts: int = 0


def _image_of(pod: Mapping[str, Any]) -> str:
    return ",".join(
        str(c.get("image") or "") for c in (pod.get("spec") or {}).get("containers") or []
    )


def _get(url: str, timeout: float = 3.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"User-Agent": KUBELET_UA})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return int(r.status), r.read(16 << 20)
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return int(e.code), e.read(1 << 20)
    except (OSError, ValueError):
        return 0, b""


class Runner:
    def __init__(self, host: NodeHost, workdir: Path) -> None:
        self.host = host
        self.workdir = workdir
        self.swaps: list[Swap] = []
        self.runs: list[Run] = []
        self.errors: list[str] = []
        self._static: dict[str, _Static] = {}
        self._api: dict[str, tuple[dict[str, Any], Run, processes.Process]] = {}
        self._seen_uids: set[str] = set()
        self._created: list[Path] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"pods {host.node}", daemon=True)
        self._next_pod_poll = 0.0

    # -- life cycle

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=120)

    def check_alive(self) -> None:
        if not self._thread.is_alive() and not self._stopping.is_set():
            raise processes.ProcessError(f"the pod runner of {self.host.node} died: {self.errors}")

    def running_image(self, manifest: str) -> str | None:
        with self._lock:
            static = self._static.get(manifest)
            return None if static is None else _image_of(static.pod)

    def snapshot(self) -> tuple[list[Swap], list[Run]]:
        with self._lock:
            return [dataclasses.replace(s) for s in self.swaps], [
                dataclasses.replace(r) for r in self.runs
            ]

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self._tick()
                except (OSError, ValueError, KeyError, yaml.YAMLError) as e:
                    if len(self.errors) < 100:
                        self.errors.append(f"{type(e).__name__}: {e}")
                    log.warning("pod runner %s: %s", self.host.node, e)
                self._stopping.wait(TICK)
        finally:
            for static in self._static.values():
                for proc in static.procs:
                    proc.stop(grace=10)
            for _, _, proc in self._api.values():
                proc.stop(grace=10)
            for path in reversed(self._created):
                try:
                    path.rmdir()
                except OSError:
                    pass

    def _tick(self) -> None:
        self._sync_static()
        self._measure_readiness()
        now = time.monotonic()
        if now >= self._next_pod_poll:
            self._next_pod_poll = now + POD_POLL
            self._take_api_pods()
        self._reap_api_pods()

    # -- static Pods

    def _manifests(self) -> dict[str, str]:
        out = {}
        for path in sorted(self.host.static_pod_path.iterdir()):
            if path.name.startswith(".") or path.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                out[path.name] = path.read_text()
            except FileNotFoundError:
                continue  # renamed away between listing and reading
        return out

    def _sync_static(self) -> None:
        wanted = self._manifests()
        for name in list(self._static):
            if name not in wanted:
                self._stop_static(self._static.pop(name))
        for name, text in wanted.items():
            current = self._static.get(name)
            if current is not None and current.text == text:
                if not all(p.alive for p in current.procs):
                    self._restart_crashed(current)
                continue
            pod = yaml.safe_load(text)
            if not isinstance(pod, dict) or pod.get("kind") != "Pod":
                continue  # kubelet ignores what is not a Pod
            pod.setdefault("spec", {})["nodeName"] = self.host.node  # kubelet sets it too
            swap = Swap(
                name, _image_of(current.pod) if current else "", _image_of(pod), time.time()
            )
            if current is not None:
                self._stop_static(current)
            swap.stopped = time.time()
            procs = self._start_pod(pod, f"static-{name}", {})
            swap.started = time.time()
            with self._lock:
                self._static[name] = _Static(name, text, pod, procs, time.monotonic())
                self.swaps.append(swap)

    def _stop_static(self, static: _Static) -> None:
        grace = float((static.pod.get("spec") or {}).get("terminationGracePeriodSeconds") or 30)
        for proc in static.procs:
            proc.stop(grace=grace)

    def _restart_crashed(self, static: _Static) -> None:
        if time.monotonic() - static.started < RESTART_PAUSE:
            return
        for proc in static.procs:
            if not proc.alive:
                static.restarts += 1
                log.info("pod runner %s: %s exited (%s): started again", self.host.node,
                         proc.name, proc.returncode)  # fmt: skip
                proc.start()
        static.started = time.monotonic()

    def _measure_readiness(self) -> None:
        pending = [s for s in self.swaps if s.ready is None and s.started]
        for swap in pending[-1:]:
            if time.time() - swap.started > READY_DEADLINE:
                continue
            if _get(f"{self.host.serve_url}/v1/readyz", timeout=0.5)[0] == 200:
                with self._lock:
                    swap.ready = time.time()

    # -- containers

    def _start_pod(
        self, pod: Mapping[str, Any], label: str, configmaps: Mapping[str, Path]
    ) -> list[processes.Process]:
        spec = pod.get("spec") or {}
        digest = hashlib.sha256(json.dumps(pod, sort_keys=True).encode()).hexdigest()[:10]
        procs = []
        for container in spec.get("containers") or []:
            image = self.host.images.get(str(container.get("image") or ""))
            if image is None:
                raise ValueError(f"{label}: no program stands for image {container.get('image')}")
            argv = podcommands.host_argv(
                pod, container, image, self.host.ports, self.host.implicit_flags
            )
            scratch = self.workdir / "scratch" / f"{label}-{digest}-{container.get('name')}"
            scratch.mkdir(parents=True, exist_ok=True)
            plan = podcommands.mounts(
                pod,
                container,
                self.host.host_paths,
                self.host.root,
                configmaps,
                scratch / "empty",
            )
            for m in plan:
                if not m.source.exists():
                    m.source.mkdir(parents=True, exist_ok=True)
            script, create = podcommands.mount_script(plan, scratch)
            for path in create:
                if not path.exists():
                    path.mkdir(mode=0o755)
                    self._created.append(path)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": os.environ.get("HOME", "/root"),
                "PYTHONUNBUFFERED": "1",
                **podcommands.container_env(pod, container),
                **image.env,
            }
            unshare = shutil.which("unshare") or "unshare"
            wrapped = [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                       script, "sh", *argv]  # fmt: skip
            proc = processes.Process(
                f"{label}/{container.get('name')} on {self.host.node}",
                wrapped,
                self.workdir / "logs" / f"{label}-{container.get('name')}.log",
                env=env,
                # The container's workingDir, else the image's (here: none, so "/").
                cwd=Path(str(container.get("workingDir") or "/")),
                die_with_parent=True,
            )
            proc.start()
            procs.append(proc)
        return procs

    def exec(self, manifest: str, words: Sequence[str], timeout: float = 60.0) -> tuple[int, str]:
        """``crictl exec`` into the first container of static Pod ``manifest``: ``words`` run
        as that image's program, with the node's ports and the container's volumes; (exit
        code, output)."""
        with self._lock:
            static = self._static.get(manifest)
        if static is None:
            raise ValueError(f"no static Pod {manifest} runs on {self.host.node}")
        pod = static.pod
        (container, *_) = (pod.get("spec") or {}).get("containers") or [{}]
        image = self.host.images[str(container.get("image") or "")]
        execed = {**container, "command": list(words), "args": []}
        argv = podcommands.host_argv(pod, execed, image, self.host.ports, self.host.implicit_flags)
        scratch = self.workdir / "scratch" / f"exec-{manifest}"
        scratch.mkdir(parents=True, exist_ok=True)
        plan = podcommands.mounts(
            pod, container, self.host.host_paths, self.host.root, {}, scratch / "empty"
        )
        script, create = podcommands.mount_script(plan, scratch)
        if any(not p.exists() for p in create):
            raise ValueError(f"exec in {manifest}: mount points missing on the host: {create}")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            **podcommands.container_env(pod, container),
            **image.env,
        }
        unshare = shutil.which("unshare") or "unshare"
        done = subprocess.run(
            [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script,
             "sh", *argv],
            env=env, cwd="/", capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        return done.returncode, done.stdout + done.stderr

    # -- run-once API Pods (the workers)

    def _take_api_pods(self) -> None:
        status, body = _get(f"{self.host.kubelet_url}/pods")
        if status != 200:
            return
        for pod in json.loads(body).get("items") or []:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            annotations = meta.get("annotations") or {}
            if (
                not uid
                or uid in self._seen_uids
                or annotations.get("kubernetes.io/config.source") == "file"
                or meta.get("deletionTimestamp")
                or (pod.get("spec") or {}).get("restartPolicy") != "Never"
                or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            ):
                continue
            containers = (pod.get("spec") or {}).get("containers") or []
            if not containers or any(c.get("image") not in self.host.images for c in containers):
                continue
            configmaps = self._configmaps(pod)
            if configmaps is None:
                continue  # not readable yet (the hub is away): next poll
            self._seen_uids.add(uid)
            name = f"{meta.get('namespace')}/{meta.get('name')}"
            run = Run(name, uid, time.time())
            procs = self._start_pod(pod, f"pod-{meta.get('name')}", configmaps)
            with self._lock:
                self.runs.append(run)
            self._api[uid] = (pod, run, procs[0])

    def _configmaps(self, pod: Mapping[str, Any]) -> dict[str, Path] | None:
        out = {}
        ns = (pod.get("metadata") or {}).get("namespace")
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            if "configMap" not in volume:
                continue
            name = volume["configMap"].get("name")
            status, body = _get(f"{self.host.proxy_url}/api/v1/namespaces/{ns}/configmaps/{name}")
            if status != 200:
                return None
            directory = (
                self.workdir / "configmaps" / str((pod["metadata"]).get("uid")) / volume["name"]
            )
            directory.mkdir(parents=True, exist_ok=True)
            for key, value in (json.loads(body).get("data") or {}).items():
                (directory / key).write_text(value)
            out[str(volume["name"])] = directory
        return out

    def _reap_api_pods(self) -> None:
        for uid, (pod, run, proc) in list(self._api.items()):
            if run.ended is None:
                if proc.alive:
                    continue
                with self._lock:
                    run.ended = time.time()
                    run.exit_code = proc.returncode
            if self._report(pod, run, proc):
                with self._lock:
                    run.reported = True
                del self._api[uid]

    def _report(self, pod: Mapping[str, Any], run: Run, proc: processes.Process) -> bool:
        meta = pod.get("metadata") or {}
        (container,) = (pod.get("spec") or {}).get("containers") or [{}]
        code = run.exit_code if run.exit_code is not None else -1
        message = proc.log.read_bytes()[-MESSAGE_BYTES:].decode("utf-8", "replace")

        def stamp(t: float) -> str:
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))

        body = {
            "status": {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": container.get("name"),
                        "image": container.get("image"),
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": code,
                                "reason": "Completed" if code == 0 else "Error",
                                "message": message,
                                "startedAt": stamp(run.started),
                                "finishedAt": stamp(run.ended or time.time()),
                            }
                        },
                    }
                ],
            }
        }
        url = (
            f"{self.host.proxy_url}/api/v1/namespaces/{meta.get('namespace')}/pods/"
            f"{meta.get('name')}/status"
        )
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            method="PATCH",
            headers={
                "Content-Type": "application/strategic-merge-patch+json",
                "Accept": "application/json",
                "User-Agent": KUBELET_UA,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                r.read()
                return True
        except urllib.error.HTTPError as e:
            with e:  # its response holds the connection
                return e.code == 404  # gone: nothing left to report to
        except OSError:
            return False
