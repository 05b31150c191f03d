"""What a Pod's container runs, as a process on this host (the test bed's stand-in for a
container runtime; ``staticpods`` carries it out).

PURE: Pod dicts, image tables and port maps in; argv, environments and mount plans out.

Kept as kubelet and the runtime do it:

* the argv: ``command`` replaces the image's ENTRYPOINT, ``args`` its CMD (an image read from
  its Dockerfile: ``dockerfile_entrypoint``); ``$(VAR)`` is expanded from the container's
  environment (``$$`` is a literal ``$``, an unknown name is left as written);
* the environment: ``value`` and the downward API's ``spec.nodeName``, ``metadata.name``,
  ``metadata.namespace``, ``status.hostIP``/``status.podIP`` (the node's loopback);
* the volumes: ``hostPath`` (the node's directory), ``configMap`` (a directory of its keys,
  filled by the caller), ``emptyDir``, each mounted at its ``mountPath``.

Stood in for (each named, so a reader knows what is not real):

* **the image**: an ``Image`` entry says which host program a command word runs (``edgehub`` ->
  this interpreter's ``-m edgehub``, ``yurthub`` -> the YurtHub binary) and with what extra
  environment (a second edgehub build: the same code with another version in its metadata);
* **the node's network**: every node here shares the host's loopback, so each has its own
  ports: a well-known port (10261, 10267, ...) in a ``--*-port=`` flag or a loopback
  ``host:port`` of an argument is rewritten to the node's (``remap``); ``implicit_flags``
  names flags a command needs made explicit because their defaults name a well-known address;
* **the node's filesystem**: each container runs in a mount namespace of its own where the
  volumes are bind mounts (``mount_script``); a missing mount point is made on an overlay of
  its nearest existing ancestor, never on the host (except directly under ``/``).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_HOSTPORT = re.compile(r"(?<![0-9.])(127\.0\.0\.1|localhost):([0-9]{2,5})(?![0-9])")
_PORT_FLAG = re.compile(r"^(--[a-z0-9-]*port)=([0-9]+)$")


@dataclasses.dataclass(frozen=True, slots=True)
class Image:
    """What an image's containers run here."""

    commands: Mapping[str, Sequence[str]]
    """Command word (the container's argv[0]) -> the host argv that stands for it."""
    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)


def dockerfile_entrypoint(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (ENTRYPOINT, CMD) of a Dockerfile's last stage, exec (JSON) form only."""
    import json

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM":
            entrypoint, cmd = (), ()
        elif word.upper() in ("ENTRYPOINT", "CMD"):
            try:
                value = json.loads(rest)
            except ValueError:
                value = None
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{word} {rest!r}: only the exec form is read")
            if word.upper() == "ENTRYPOINT":
                entrypoint = tuple(value)
            else:
                cmd = tuple(value)
    return entrypoint, cmd


def expand(text: str, env: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR.sub(one, text)


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    meta = pod.get("metadata") or {}
    fields = {
        "spec.nodeName": str((pod.get("spec") or {}).get("nodeName") or ""),
        "metadata.name": str(meta.get("name") or ""),
        "metadata.namespace": str(meta.get("namespace") or ""),
        "status.hostIP": "127.0.0.1",
        "status.podIP": "127.0.0.1",
    }
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = str(item.get("name") or "")
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
        else:
            path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path in fields:
                env[name] = fields[path]
    return env


def remap(arg: str, ports: Mapping[int, int]) -> str:
    """``arg`` with its well-known ports moved to this node's."""
    flag = _PORT_FLAG.match(arg)
    if flag is not None and int(flag.group(2)) in ports:
        return f"{flag.group(1)}={ports[int(flag.group(2))]}"

    def one(match: re.Match[str]) -> str:
        port = int(match.group(2))
        return f"{match.group(1)}:{ports[port]}" if port in ports else match.group(0)

    return _HOSTPORT.sub(one, arg)


def host_argv(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    image: Image,
    ports: Mapping[int, int],
    implicit_flags: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """The host argv of ``container``: its words (command/args over the image's ENTRYPOINT/CMD,
    ``$(VAR)`` expanded), the first word replaced by the image's host program, the node's
    ports, and ``implicit_flags[<sub-command>]`` appended when the command does not set them."""
    env = container_env(pod, container)
    command = [expand(str(w), env) for w in container.get("command") or []]
    args = [expand(str(w), env) for w in container.get("args") or []]
    words = [*command, *args] if command else [*image.entrypoint, *(args or image.cmd)]
    if not words:
        raise ValueError("the container has no command and the image no ENTRYPOINT")
    head = image.commands.get(words[0])
    if head is None:
        raise ValueError(f"image has no program for command {words[0]!r}")
    rest = [remap(w, ports) for w in words[1:]]
    for sub, flags in (implicit_flags or {}).items():
        if rest and rest[0] == sub:
            given = {w.split("=", 1)[0] for w in rest}
            rest += [remap(f, ports) for f in flags if f.split("=", 1)[0] not in given]
    return [*head, *rest]


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    path: str
    """Where the container sees it."""
    source: Path
    """The host directory bound there."""
    read_only: bool = False


def mounts(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    host_path: Mapping[str, Path],
    node_root: Path,
    configmap_dir: Mapping[str, Path],
    empty_dir: Path,
) -> list[Mount]:
    """The container's volume mounts: a hostPath is ``host_path[path]`` when named there, else
    ``node_root`` + path; a configMap volume is ``configmap_dir[volume]``; an emptyDir is a
    directory under ``empty_dir``."""
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    out = []
    for m in container.get("volumeMounts") or []:
        volume = volumes.get(m.get("name"))
        if volume is None:
            raise ValueError(f"volumeMount {m.get('name')!r} names no volume")
        if "hostPath" in volume:
            path = str(volume["hostPath"].get("path") or "")
            source = host_path.get(path, node_root / path.lstrip("/"))
        elif "configMap" in volume:
            source = configmap_dir[str(volume["name"])]
        elif "emptyDir" in volume:
            source = empty_dir / str(volume["name"])
        else:
            raise ValueError(f"volume {volume.get('name')!r}: only hostPath, configMap, emptyDir")
        out.append(Mount(str(m["mountPath"]), source, bool(m.get("readOnly"))))
    return out


def _nearest_existing(path: Path, exists: Any) -> Path:
    while not exists(path):
        path = path.parent
    return path


def mount_script(
    plan: Sequence[Mount], scratch: Path, exists: Any = None, is_dir: Any = None
) -> tuple[str, list[Path]]:
    """A ``sh -c`` prologue binding ``plan`` in a private mount namespace, then ``exec "$@"``,
    and the host directories it needs created first (mount points directly under ``/``; an
    overlay of a nearest existing ancestor cannot be ``/``). ``exists``/``is_dir`` (for tests)
    default to ``Path.exists``/``Path.is_dir``."""
    exists = exists or (lambda p: p.exists())
    is_dir = is_dir or (lambda p: p.is_dir())
    lines = ["set -e"]
    create: list[Path] = []
    overlays: list[Path] = []
    for m in plan:
        point = Path(m.path)
        if exists(point):
            continue
        ancestor = _nearest_existing(point, exists)
        if ancestor == Path("/"):
            create.append(Path("/") / point.parts[1])
            continue
        if not any(ancestor == o or o in ancestor.parents for o in overlays):
            overlays = [o for o in overlays if ancestor not in o.parents]
            overlays.append(ancestor)
    for i, lower in enumerate(sorted(overlays, key=lambda p: len(p.parts))):
        upper, work = scratch / f"upper{i}", scratch / f"work{i}"
        lines.append(f"mkdir -p {shlex.quote(str(upper))} {shlex.quote(str(work))}")
        options = f"lowerdir={lower},upperdir={upper},workdir={work}"
        lines.append(
            f"mount -t overlay overlay -o {shlex.quote(options)} {shlex.quote(str(lower))}"
        )
    for m in plan:
        target, source = shlex.quote(m.path), shlex.quote(str(m.source))
        if is_dir(m.source) or not exists(m.source):  # a file is bound onto a file
            lines.append(f"mkdir -p {target}")
        lines.append(f"mount --bind {source} {target}")
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    lines.append('exec "$@"')
    return "\n".join(lines), create
