"""``edgehub static-pod-upgrade``: what a YurtStaticSet's worker Pod runs on its node (the flags
of OpenYurt's ``node-servant static-pod-upgrade``, plus where the files are).

1. Reads the new manifest from the mounted ConfigMap (``<configmap-dir>/<manifest>``) and
   checks that it carries ``--hash``.
2. The live manifest ``<static-pod-path>/<manifest>.yaml`` already has that hash: nothing to
   do, exit 0 (a worker started twice changes nothing).
3. Otherwise the live manifest is copied to ``.<manifest>.yaml.bak`` and the new one is written
   to ``.<manifest>.yaml.upgrading`` and renamed over the live one (each file: temp in the same
   directory, fsync, rename, fsync of the directory; kubelet ignores dot files). kubelet then
   replaces the static Pod.
4. Waits up to ``--timeout`` for the new static Pod to be ready (``staticpodupgrading.ready``:
   ``--readyz-url`` answers 200 and ``--status-url``'s ``startedAt`` is after the write; a
   static Pod without a status document, YurtHub, once ``--readyz-url`` failed since).
   Ready: exit 0. Not ready in time: the backup is put back the same atomic way (or the new
   manifest removed, when there was none before), one line says so, exit 1.

Both modes (``auto``, ``ota``) wait and roll back. [quirk] node-servant's OTA mode only
replaces the file; a careful user wants the same safety net when the node asks for it.
Bad flags or unreadable files exit 3 with one line. Writes only in ``--static-pod-path``.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

import click

from edgehub import cli, helpgroups, staticpodupgrading
from yurthub import atomicfiles, otadecisions

EXIT_NOT_READY = 1
PROBE_TIMEOUT = 2.0
MAX_MANIFEST_BYTES = 1 << 20


def _fail(message: str, code: int = cli.EXIT_STARTUP_FAILURE) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


def _say(message: str) -> None:
    click.echo(f"static-pod-upgrade: {message}", err=True)


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_MANIFEST_BYTES:
        raise OSError(f"{path} is larger than {MAX_MANIFEST_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


def _probe(url: str) -> tuple[int | None, Any]:
    """(HTTP status, JSON document or None); (None, None) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT) as resp:
            body = resp.read(1 << 20)
            status = int(resp.status)
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return e.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return None, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def wait_ready(
    readyz_url: str, status_url: str, written_at: float, timeout: float, interval: float
) -> bool:
    deadline = time.monotonic() + timeout
    seen_down = False
    while True:
        readyz, _ = _probe(readyz_url)
        seen_down = seen_down or readyz != 200
        started = None
        no_status = False
        if status_url and readyz == 200:
            code, document = _probe(status_url)
            started = staticpodupgrading.started_at(document)
            no_status = code == 404
        if staticpodupgrading.ready(
            readyz,
            started,
            written_at,
            check_start=bool(status_url),
            no_status=no_status,
            seen_down=seen_down,
        ):
            return True
        if time.monotonic() + interval > deadline:
            return False
        time.sleep(interval)


@click.command(
    "static-pod-upgrade",
    cls=helpgroups.Command,
    topics="static-pod-upgrade",
    context_settings=cli.COMMAND_CONTEXT,
)
@click.option("--name", required=True, help="The static Pod's mirror Pod name (<yss>-<node>).")
@click.option("--namespace", required=True, help="The static Pod's namespace.")
@click.option(
    "--manifest", required=True, help="The manifest's name: <static-pod-path>/<manifest>.yaml."
)
@click.option("--hash", "want_hash", required=True, help="The new template's hash.")
@click.option(
    "--mode",
    default="auto",
    type=click.Choice(sorted(staticpodupgrading.MODES), case_sensitive=False),
    help="auto (AdvancedRollingUpdate) or ota; both wait for readiness and roll back.",
)
@click.option(
    "--static-pod-path",
    default="/etc/kubernetes/manifests",
    type=click.Path(file_okay=False, path_type=Path),
    help="kubelet's staticPodPath (mounted from the host).",
)
@click.option(
    "--configmap-dir",
    default="/data",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the yurt-static-set-<yss> ConfigMap is mounted.",
)
@click.option(
    "--timeout",
    default="2m",
    help="How long the new static Pod has to become ready (120, 120s, 2m).",
)
@click.option(
    "--readyz-url",
    default="http://127.0.0.1:10267/v1/readyz",
    help="The new static Pod is ready when this answers 200 (the hub's readiness).",
)
@click.option(
    "--status-url",
    default="http://127.0.0.1:10267/v1/status",
    help="A JSON document whose startedAt must be after the write (the hub's status); '' "
    "skips that check (a static Pod that is not a hub).",
)
@click.option(
    "--poll-interval",
    default=0.5,
    type=click.FloatRange(min=0.01),
    help="Seconds between readiness probes.",
)
def command(
    name: str,
    namespace: str,
    manifest: str,
    want_hash: str,
    mode: str,
    static_pod_path: Path,
    configmap_dir: Path,
    timeout: str,
    readyz_url: str,
    status_url: str,
    poll_interval: float,
) -> None:
    """Install a YurtStaticSet's new static Pod manifest on this node, wait for it to be ready
    and put the old one back when it is not (a YurtStaticSet worker Pod runs this)."""
    problem = staticpodupgrading.manifest_problem(manifest)
    if problem:
        _fail(problem)
    seconds = staticpodupgrading.parse_duration(timeout)
    if seconds is None:
        _fail(f"--timeout {timeout[:32]!r}: not a positive duration (120, 120s, 2m)")
    if not static_pod_path.is_dir():
        _fail(f"--static-pod-path {static_pod_path}: not a directory")
    files = otadecisions.manifest_paths(str(static_pod_path), manifest)
    live, staging, backup = Path(files.live), Path(files.staging), Path(files.backup)
    source = configmap_dir / manifest
    try:
        new = _read(source)
        old = _read(live)
    except OSError as e:
        _fail(str(e))
    if new is None:
        _fail(f"{source}: no such file (is the ConfigMap yurt-static-set-<yss> mounted?)")
    decision = staticpodupgrading.decide(old, new, want_hash)
    target = f"{namespace}/{name}"
    if decision.action == staticpodupgrading.REFUSE:
        _fail(f"{target}: {decision.reason}")
    if decision.action == staticpodupgrading.ALREADY:
        _say(f"{target}: {decision.reason}; nothing to do")
        return
    try:
        if old is not None:
            atomicfiles.write(backup, old.encode(), staging=staging)
        written_at = time.time()
        atomicfiles.write(live, new.encode(), staging=staging)
    except OSError as e:
        _fail(f"cannot write in {static_pod_path}: {e.strerror or e}")
    _say(f"{target}: {live} now has hash {want_hash} ({staticpodupgrading.MODES[mode.lower()]})")
    if wait_ready(readyz_url, status_url, written_at, seconds, poll_interval):
        _say(f"{target}: ready with hash {want_hash}")
        return
    try:
        if old is not None:
            atomicfiles.write(live, old.encode(), staging=staging)
        else:
            live.unlink(missing_ok=True)
            atomicfiles.fsync_dir(live.parent)
    except OSError as e:
        _fail(
            f"{target}: not ready within {seconds:g} s, and the old manifest could not be "
            f"put back: {e.strerror or e}",
            EXIT_NOT_READY,
        )
    what = f"old manifest restored from {backup}" if old is not None else "new manifest removed"
    click.echo(
        f"error: {target}: hash {want_hash} not ready within {seconds:g} s ({readyz_url}); {what}",
        err=True,
    )
    sys.exit(EXIT_NOT_READY)
