"""What the hub's OTA API decides (``yurthub/ota.py`` carries it out).

PURE: Pod and ConfigMap dicts, addresses and clocks in; refusals, kinds, patches and file
names out. No aiohttp, no files.

YurtHub v1.7.0's OTA API, on the hub server port (reference §1.3):

- ``GET /pods``: the Pods kubelet read through the hub, from the cache, as one ``v1 PodList``.
- ``POST /openyurt.io/v1/namespaces/{ns}/pods/{pod}/upgrade``: the Pod must be bound to this
  node, not being deleted, with condition ``PodNeedUpgrade`` True (set by the cloud's
  controllers only for a DaemonSet with annotation ``apps.openyurt.io/update-strategy: OTA``
  and for a YurtStaticSet with the OTA strategy); when it also has ``PodImageReady``, that must
  be True for the revision ``PodNeedUpgrade`` names. Then by its first owner's kind: a
  ``DaemonSet`` Pod is deleted (the DaemonSet, ``OnDelete``, recreates it from the new
  template); a ``Node``-owned mirror Pod ``<yss>-<node>`` gets the manifest of ConfigMap
  ``yurt-static-set-<yss>`` installed in kubelet's static Pod path.
- ``POST .../imagepull``: the same Pod checks (without the image one), then the Pod's status
  gets ``PodImageReady`` False with the revision to pull; the cloud's image pre-heat controller
  answers it with an image-pull Job on this node and sets the condition True when it is done.

Refusal codes are YurtHub's (403 for a Pod that may not be upgraded, 400 for an owner kind it
does not upgrade, 500 when the apiserver refuses a read or write, 503 offline); the bodies are
Kubernetes ``Status`` objects where YurtHub writes plain text.

Only callers on this node may use it: a peer address that is not loopback is refused, whatever
``--bind-address`` the hub server listens on.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

POD_NEED_UPGRADE = "PodNeedUpgrade"
"""The condition OpenYurt's daemonpodupdater and YurtStaticSet controllers set True on a Pod
that has a newer template to move to."""
POD_IMAGE_READY = "PodImageReady"
"""The condition the image pre-heat controller sets once the new images are on the node."""
VERSION_PREFIX = "controllerrevision: "
"""How both conditions' messages name the revision (``controllerrevision: <hash>``)."""
UPDATE_STRATEGY_ANNOTATION = "apps.openyurt.io/update-strategy"
OTA_STRATEGY = "OTA"
CONFIGMAP_PREFIX = "yurt-static-set-"
FIELD_MANAGER = "yurthub-ota"
"""The field manager of the imagepull status patch (YurtHub's)."""

DAEMON_SET = "DaemonSet"
STATIC = "Node"
"""The owner kind of a mirror Pod (kubelet makes the node its owner)."""

OFFLINE_MESSAGE = "the cloud is unreachable: OTA upgrades need the apiserver"
PATH_PATTERN = re.compile(r"^/openyurt\.io/v1/namespaces/([^/]+)/pods/([^/]+)/(upgrade|imagepull)$")
"""An OTA action path; served on the hub server port only."""


def is_ota_path(path: str) -> bool:
    """An OTA action path: the proxy ports never serve nor forward it."""
    return PATH_PATTERN.match(path) is not None


def peer_refusal(peer: str | None, api: str = "the OTA API") -> str:
    """Why a caller from address ``peer`` may not use ``api`` ("" when it may): only this
    node's own processes (loopback, IPv4 or IPv6, also IPv4-mapped) may. Also used for the hub
    server's ``/v1/token``, whatever address that port is bound to."""
    if not peer:
        return f"the caller's address is unknown: {api} answers callers on this node only"
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return f"the caller's address {peer[:64]!r} is not an IP address"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return ""
    return f"{api} answers callers on this node only (loopback), not {address}"


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    code: int
    message: str


def _conditions(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return []
    return [c for c in conditions if isinstance(c, Mapping)]


def condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The Pod's condition of type ``kind`` (the first, as Kubernetes reads it), or None."""
    for found in _conditions(pod):
        if found.get("type") == kind:
            return found
    return None


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _name(pod: Mapping[str, Any]) -> str:
    meta = _meta(pod)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def next_revision(pod: Mapping[str, Any]) -> str:
    """The revision ``PodNeedUpgrade`` names ("" when it names none)."""
    found = condition(pod, POD_NEED_UPGRADE)
    message = found.get("message") if found is not None else None
    if not isinstance(message, str):
        return ""
    return message.removeprefix(VERSION_PREFIX)


def status_problem(pod: Mapping[str, Any], node: str) -> str:
    """Why ``pod`` may not be upgraded nor have its image pulled by this node's hub ("" when
    it may): being deleted, bound elsewhere, or ``PodNeedUpgrade`` not True."""
    name = _name(pod)
    if _meta(pod).get("deletionTimestamp"):
        return f"Pod {name} is deleting, can not be updated"
    spec = pod.get("spec")
    bound = spec.get("nodeName", "") if isinstance(spec, Mapping) else ""
    if bound != node:
        return f"Pod: {name} is running on {bound or '(no node)'}, can not be updated"
    found = condition(pod, POD_NEED_UPGRADE)
    if found is None or found.get("status") != "True":
        return (
            f"Pod: {name} update status is False, can not be updated (condition "
            f"{POD_NEED_UPGRADE} is {found.get('status') if found else 'absent'})"
        )
    return ""


def image_problem(pod: Mapping[str, Any]) -> str:
    """Why ``pod``'s new images are not ready ("" when they are, or nobody pulls them first):
    a ``PodImageReady`` condition that is not True for the revision to move to."""
    found = condition(pod, POD_IMAGE_READY)
    if found is None:
        return ""
    message = found.get("message")
    revision = message.removeprefix(VERSION_PREFIX) if isinstance(message, str) else ""
    if found.get("status") == "True" and revision == next_revision(pod):
        return ""
    return (
        f"Pod: {_name(pod)} image is not ready, reason: {found.get('reason', '')}, "
        f"message: {found.get('message', '')}"
    )


def upgrade_refusal(pod: Mapping[str, Any], node: str) -> Refusal | None:
    """The pre-checks of an upgrade (YurtHub's 403), None when they pass."""
    name = _name(pod)
    problem = status_problem(pod, node)
    if problem:
        return Refusal(
            403, f"Pre check update pod failed, Failed to check pod {name} status, error: {problem}"
        )
    problem = image_problem(pod)
    if problem:
        return Refusal(
            403,
            f"Pre check update pod failed, Failed to check pod {name} image ready, error: "
            f"{problem}",
        )
    return None


def imagepull_refusal(pod: Mapping[str, Any], node: str) -> Refusal | None:
    problem = status_problem(pod, node)
    if problem:
        return Refusal(403, f"Failed to check pod status {_name(pod)}, error: {problem}")
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Kind:
    """How a Pod is upgraded: ``DAEMON_SET`` (delete it) or ``STATIC`` (its YurtStaticSet
    ``static_set``'s manifest)."""

    kind: str
    static_set: str = ""


def upgrade_kind(pod: Mapping[str, Any], node: str) -> Kind | Refusal:
    """By the Pod's first owner, as YurtHub picks: a DaemonSet Pod, or a mirror Pod named
    ``<yss>-<node>``."""
    refs = _meta(pod).get("ownerReferences")
    first = refs[0] if isinstance(refs, list) and refs else None
    if not isinstance(first, Mapping):
        return Refusal(400, "Pod has no owner references")
    kind = first.get("kind")
    if kind == DAEMON_SET:
        return Kind(DAEMON_SET)
    if kind == STATIC:
        name = str(_meta(pod).get("name", ""))
        suffix = f"-{node}"
        if not name.endswith(suffix) or len(name) == len(suffix):
            return Refusal(
                500,
                f"Static pod pre-check failed: pod name {name!r} is not <yurtstaticset>{suffix}",
            )
        return Kind(STATIC, name.removesuffix(suffix))
    return Refusal(400, f"Not support ota upgrade pod type {kind}")


def configmap_name(static_set: str) -> str:
    return CONFIGMAP_PREFIX + static_set


@dataclasses.dataclass(frozen=True, slots=True)
class Manifest:
    """A static Pod manifest to install: ``<name>.yaml`` in the static Pod path."""

    name: str
    text: str


def manifest(configmap: Mapping[str, Any]) -> Manifest | str:
    """The one manifest a YurtStaticSet's ConfigMap holds (its key is ``staticPodManifest``,
    the file name without ``.yaml``), or why there is none to install."""
    name = str(_meta(configmap).get("name", ""))
    data = configmap.get("data")
    entries = list(data.items()) if isinstance(data, Mapping) else []
    if len(entries) != 1:
        return f"ConfigMap {name} holds {len(entries)} manifests, not one"
    key, text = entries[0]
    problem = file_name_problem(str(key))
    if problem:
        return f"ConfigMap {name}: {problem}"
    if not isinstance(text, str) or not text.strip():
        return f"empty manifest in configmap {name}"
    return Manifest(str(key), text)


def file_name_problem(name: str) -> str:
    """Why ``name`` cannot name a manifest in the static Pod path ("" when it can): a plain
    file name kubelet reads (not a dot file), as ``edgehub static-pod-upgrade`` requires."""
    if not name or "/" in name or "\x00" in name or name.startswith(".") or len(name) > 200:
        return (
            f"manifest name {name[:64]!r} must be a plain file name, without '/' or a leading '.'"
        )
    return ""


def manifest_pod_problem(text: str, namespace: str, name: str, which: str) -> str:
    """Why the manifest ``text`` is not static pod ``namespace/name`` ("" when it is): its
    ``metadata.name`` and ``metadata.namespace`` (kubelet's default ``default``). An upgrade
    of mirror Pod ``<name>-<node>`` may only replace that pod's own manifest with another of
    it: a Pod that merely looks like a mirror Pod (anyone who may create Pods can give one a
    Node owner, and a ConfigMap beside it) must not choose a file of another static pod.
    ``which``: how to name the manifest in the answer."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return f"{which} is not YAML"
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    if not isinstance(meta, Mapping):
        return f"{which} is not a Pod manifest with metadata"
    found = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    if found != (namespace, name):
        return f"{which} is of static pod {found[0]}/{found[1]}, not static pod {namespace}/{name}"
    return ""


@dataclasses.dataclass(frozen=True, slots=True)
class ManifestPaths:
    """Files in the static Pod path: everything but the live manifest is a dot file, which
    kubelet ignores (the names ``edgehub static-pod-upgrade`` uses)."""

    live: str
    staging: str
    backup: str


def manifest_paths(static_pod_path: str, name: str) -> ManifestPaths:
    base = static_pod_path.rstrip("/") or "/"
    file = f"{name}.yaml"
    return ManifestPaths(
        live=f"{base}/{file}", staging=f"{base}/.{file}.upgrading", backup=f"{base}/.{file}.bak"
    )


def format_time(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def imagepull_patch(pod: Mapping[str, Any], now: datetime.datetime) -> dict[str, Any]:
    """The merge patch of ``pods/<name>/status`` asking for the new images: every condition
    kept, ``PodImageReady`` set False with the revision to pull (its transition time kept when
    it already was False)."""
    wanted: dict[str, Any] = {
        "type": POD_IMAGE_READY,
        "status": "False",
        "message": VERSION_PREFIX + next_revision(pod),
        "lastProbeTime": None,
        "lastTransitionTime": format_time(now),
    }
    conditions: list[Any] = []
    replaced = False
    for found in _conditions(pod):
        if found.get("type") == POD_IMAGE_READY and not replaced:
            replaced = True
            if found.get("status") == wanted["status"] and found.get("lastTransitionTime"):
                wanted["lastTransitionTime"] = found["lastTransitionTime"]
            conditions.append(wanted)
        else:
            conditions.append(dict(found))
    if not replaced:
        conditions.append(wanted)
    return {"status": {"conditions": conditions}}


def pod_list(items: Sequence[bytes]) -> bytes:
    """``GET /pods``: a ``v1 PodList`` of the given JSON Pods (YurtHub's list has no
    resourceVersion)."""
    return b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[' + b",".join(items) + b"]}"


def started_message(namespace: str, name: str) -> bytes:
    return f"Start updating pod {namespace}/{name}".encode()


def imagepull_message(namespace: str, name: str) -> bytes:
    return f"Image pre-pull requested for pod {namespace}/{name}".encode()
