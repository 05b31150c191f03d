"""Who listed what, from kube-apiserver's audit log (``audit_args``: LISTs and WATCHes).

kube-apiserver's metrics count requests per resource, not per client nor per resourceVersion;
the audit log says both. A **relist** (the fleet's targets' sense: asking for everything anew)
is a LIST with ``resourceVersion`` unset (a consistent read) or ``0`` (whatever the watch cache
has), or a **streaming list**: a WATCH with ``sendInitialEvents=true``, which client-go (1.35+,
kubelet and kube-proxy among its users) sends instead of a LIST. A LIST from a given version
counts apart (``"other"``), and so does a watch resumed from a version (``resumed``): what a
client does when it needs nothing anew.

A LIST is counted when it completes, a WATCH when its response starts (a watch completes
minutes later, if ever in the window). ``read_from`` reads the log from a byte offset (a
bounded amount: a storm's window), so a bench notes the offset before a storm and reads only
what the storm caused. ``parse`` and ``summarize`` are PURE.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import pathlib
import urllib.parse
from collections.abc import Iterable

import orjson
import yaml

MAX_READ = 256 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class ListCall:
    user: str
    component: str
    """The User-Agent's first word (``kubelet``, ``kube-proxy``, ``multiplexer-proxy-<node>``,
    ``yurthub``, ``hollow-kubelet``...)."""
    resource: str
    version: str
    """``""`` (unset), ``"0"`` or ``"other"``; for a WATCH ``"stream"`` (``sendInitialEvents``,
    a streaming list) or ``"resumed"`` (from a resourceVersion) or ``"new"`` (from now)."""
    code: int
    verb: str = "list"
    at: float = 0.0
    """When the apiserver received it (wall clock, seconds; 0.0: not in the log)."""


def _received(event: dict[str, object]) -> float:
    """``requestReceivedTimestamp`` in seconds (0.0 when absent or malformed). PURE."""
    stamp = event.get("requestReceivedTimestamp")
    if not isinstance(stamp, str):
        return 0.0
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def parse(line: bytes) -> ListCall | None:
    """One audit event line; None unless it is a finished LIST. PURE."""
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(event, dict):
        return None
    verb, stage = event.get("verb"), event.get("stage")
    if verb == "list":
        if stage not in (None, "ResponseComplete", "Panic"):
            return None
    elif verb == "watch":
        if stage != "ResponseStarted":
            return None
    else:
        return None
    query = urllib.parse.parse_qs(
        urllib.parse.urlsplit(str(event.get("requestURI", ""))).query, keep_blank_values=True
    )
    rv = (query.get("resourceVersion") or [""])[0]
    if verb == "watch":
        if (query.get("sendInitialEvents") or [""])[0] == "true":
            version = "stream"
        else:
            version = "new" if rv in ("", "0") else "resumed"
    else:
        version = rv if rv in ("", "0") else "other"
    agent = str(event.get("userAgent") or "")
    ref = event.get("objectRef") or {}
    return ListCall(
        user=str((event.get("user") or {}).get("username") or ""),
        component=agent.split("/", 1)[0].split(" ", 1)[0],
        resource=str(ref.get("resource") or ""),
        version=version,
        code=int((event.get("responseStatus") or {}).get("code") or 0),
        verb=str(verb),
        at=_received(event),
    )


def read_from(path: pathlib.Path, offset: int) -> tuple[list[ListCall], int]:
    """The LISTs logged after ``offset`` and the offset to read from next time (the log
    rotated meanwhile: read from its start)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return [], 0
    if size < offset:
        offset = 0
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read(MAX_READ)
    # Only whole lines: a line being written is read next time.
    end = data.rfind(b"\n") + 1
    calls = [c for line in data[:end].splitlines() if (c := parse(line)) is not None]
    return calls, offset + end


def size(path: pathlib.Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@dataclasses.dataclass(frozen=True, slots=True)
class Lists:
    by_version: dict[str, int]
    """LISTs: ``""``/``"0"``/``"other"``; WATCHes: ``"stream"``/``"resumed"``/``"new"``."""
    by_component: dict[str, int]
    """Relists per component."""
    by_resource: dict[str, int]
    """Relists per resource."""

    @property
    def relists(self) -> int:
        """LISTs from scratch (resourceVersion unset or 0) plus streaming lists."""
        return sum(self.by_version.get(k, 0) for k in ("", "0", "stream"))

    @property
    def lists(self) -> int:
        """Every LIST (whatever its resourceVersion)."""
        return sum(self.by_version.get(k, 0) for k in ("", "0", "other"))

    @property
    def resumed(self) -> int:
        """Watches resumed from a resourceVersion (no relist)."""
        return self.by_version.get("resumed", 0)

    @property
    def total(self) -> int:
        return sum(self.by_version.values())


def summarize(calls: Iterable[ListCall], users: frozenset[str] | None = None) -> Lists:
    """The LISTs and WATCHes of ``users`` (all when None) by version kind; the relists also by
    component (a ``multiplexer-proxy-<node>`` counted as ``multiplexer-proxy``) and resource.
    PURE."""
    by_version: collections.Counter[str] = collections.Counter()
    by_component: collections.Counter[str] = collections.Counter()
    by_resource: collections.Counter[str] = collections.Counter()
    for call in calls:
        if users is not None and call.user not in users:
            continue
        by_version[call.version] += 1
        if call.version not in ("", "0", "stream"):
            continue
        component = call.component
        if component.startswith("multiplexer-proxy-"):
            component = "multiplexer-proxy"
        by_component[component] += 1
        by_resource[call.resource] += 1
    return Lists(dict(by_version), dict(by_component), dict(by_resource))


def write_audit_policy(path: pathlib.Path) -> pathlib.Path:
    """An audit policy recording every LIST and WATCH (metadata only): which client listed or
    watched what from which resourceVersion (``fleetaudit``), at a cost the fleet's steady
    state hardly notices (a watch is re-opened every 5-10 min); and every write of a Node's
    status, and every read of a Node, by whom and when (kubelet's reads and reports and the node
    lifecycle controller's Unknown: when a node turned Ready after a heal, and whether it stayed
    so; ``parse`` skips them)."""
    node_status = {"group": "", "resources": ["nodes/status"]}
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "verbs": ["list", "watch"]},
            {"level": "Metadata", "verbs": ["patch", "update"], "resources": [node_status]},
            {
                "level": "Metadata",
                "verbs": ["get"],
                "resources": [{"group": "", "resources": ["nodes"]}],
            },
            {"level": "None"},
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(policy))
    return path


def audit_args(directory: pathlib.Path) -> dict[str, str]:
    """kube-apiserver flags for ``write_audit_policy``'s log in ``directory``."""
    policy = write_audit_policy(directory / "audit-policy.yaml")
    return {
        "audit-policy-file": str(policy),
        "audit-log-path": str(directory / "audit.log"),
        "audit-log-maxsize": "200",
        "audit-log-maxbackup": "1",
        "audit-log-format": "json",
    }
