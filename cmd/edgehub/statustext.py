"""The text screen of ``edgehub status``, from the hub's ``/v1/status`` and the discovery
agent's ``/status`` JSON.

PURE: dicts in, text out (table-tested in ``tests/unit/test_status_text.py``). Every field may
be missing (an older hub, a section that failed): what is not there is shown as ``-``, never a
crash. Every string from the documents is shown through ``visible`` (``render`` passes them
through ``visible.tree`` first): an escape sequence in an apiserver's error shows as text.
Nothing here contacts anything.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from edgehub import outagetext, visible


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    if seconds < 172800:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def _span(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 0:
        return f"EXPIRED {_ago(-seconds)}"
    if seconds < 7200:
        return f"in {seconds // 60}m"
    if seconds < 172800:
        return f"in {seconds // 3600}h"
    return f"in {seconds // 86400}d"


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _seconds_since(iso: str | None, now: float) -> float | None:
    if not iso:
        return None
    try:
        when = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None
    return now - when.timestamp()


def _write_failures(cache: Mapping[str, Any]) -> str:
    failed = cache.get("writeFailures", 0)
    if "errorKeys" not in cache:  # an older hub counted the keys here
        return f"{failed} keys whose last write failed"
    return f"{failed} failed writes ({cache['errorKeys']} objects not stored)"


def hub_lines(hub: Mapping[str, Any], url: str, now: float) -> list[str]:
    lines = [f"edgehub hub on node {hub.get('node', '-')} ({url})"]
    not_ready: Iterable[str] = hub.get("notReady") or []
    if hub.get("ready"):
        lines.append("Ready: yes")
    else:
        lines.append("Ready: NO")
        lines += [f"  - {why}" for why in not_ready]
    lines += [f"  warning: {w}" for w in hub.get("warnings") or []]

    lines += ["", "APISERVERS"]
    rows = [["SERVER", "HEALTH", "LAST SUCCESS", "LAST ERROR"]]
    for server in hub.get("servers") or []:
        error = server.get("lastError") or ""
        if error:
            error = f"{error} ({_ago(_seconds_since(server.get('lastErrorTime'), now))})"
        rows.append(
            [
                str(server.get("url", "-")),
                "healthy" if server.get("healthy") else "UNHEALTHY",
                _ago(_seconds_since(server.get("lastSuccessTime"), now))
                if server.get("lastSuccessTime")
                else "never",
                error or "-",
            ]
        )
    lines += _table(rows)

    cache = hub.get("cache")
    lines.append("")
    if not isinstance(cache, Mapping):
        lines.append("CACHE  none (--working-mode=cloud, or the cache could not be opened)")
    elif "error" in cache:
        lines.append(f"CACHE  cannot be read: {cache['error']}")
    else:
        lines.append(
            f"CACHE  {cache.get('path', '-')}  {_size(cache.get('sizeBytes'))}, "
            f"{cache.get('objects', '-')} objects, {cache.get('lists', '-')} lists, "
            f"{cache.get('documents', '-')} documents, {_write_failures(cache)}"
        )
        if cache.get("sealedBy"):
            lines.append(f"  sealed: its data key by the {cache['sealedBy']}")
        if cache.get("reset"):
            lines.append(f"  warning: started anew: {cache['reset']}")
        error = cache.get("writeError")
        if isinstance(error, Mapping):
            state = "failing" if error.get("failing") else f"the last at {error.get('last', '-')}"
            lines.append(
                f"  warning: writes fail: {error.get('reason', '-')} since "
                f"{error.get('since', '-')} ({state}; {error.get('lostLists', 0)} lists read "
                "but not stored)"
            )
        events = cache.get("offlineEvents")
        if isinstance(events, Mapping) and (events.get("pending") or events.get("dropped")):
            lines.append(
                f"  offline Events: {events.get('pending', 0)} waiting for the cloud, "
                f"{events.get('dropped', 0)} dropped over the journal's bounds"
            )
        rows = [["COMPONENT", "OBJECTS", "LISTS", "NEWEST LIST"]]
        for component in cache.get("components") or []:
            newest = component.get("newestList") or {}
            rows.append(
                [
                    str(component.get("component", "-")),
                    str(component.get("objects", 0)),
                    str(component.get("lists", 0)),
                    _ago(newest.get("ageSeconds")) if newest else "never listed",
                ]
            )
        if len(rows) == 1:
            lines.append("  (empty: nothing can be answered offline yet)")
        else:
            lines += _table(rows)

    lines += ["", "CERTIFICATES"]
    rows = [["NAME", "SUBJECT", "EXPIRES", "KEY", "FILE"]]
    problems = []
    for cert in hub.get("certificates") or []:
        expires = "-"
        if "expiresInSeconds" in cert:
            expires = f"{cert.get('notAfter', '-')} ({_span(cert['expiresInSeconds'])})"
        key = "-"
        if "keySealedWith" in cert:
            sealed = cert["keySealedWith"]
            key = "plain PEM" if sealed is None else f"sealed (data key {sealed})"
        rows.append(
            [
                str(cert.get("name", "-")),
                str(cert.get("subject", "none yet")),
                expires,
                key,
                str(cert.get("file", "-")),
            ]
        )
        if cert.get("problem"):
            problems.append(f"  {cert.get('name')}: {cert['problem']}")
    if len(rows) == 1:
        lines.append("  none (token or anonymous identity)")
    else:
        lines += _table(rows)
    lines += problems

    lines += outagetext.status_lines(hub.get("outages"))
    lines += filter_lines(hub.get("filters"))
    lines += pool_lines(hub.get("pool") or {}, now)
    return lines


def filter_lines(filters: Any) -> list[str]:
    """The active response filters, and those kept off with why (grouped by reason)."""
    if not isinstance(filters, Mapping):
        return ["", "FILTERS  -"]
    active = [str(name) for name in filters.get("active") or []]
    note = filters.get("note")
    shown = ", ".join(active) or (f"none ({note})" if note else "none")
    lines = ["", f"FILTERS  {shown}"]
    inactive = filters.get("inactive")
    by_reason: dict[str, list[str]] = {}
    for name, why in inactive.items() if isinstance(inactive, Mapping) else ():
        by_reason.setdefault(str(why), []).append(str(name))
    where = filters.get("hubAddress") or "-"
    for why, names in by_reason.items():
        lines.append(f"  OFF: {', '.join(names)} (pods cannot reach the hub at {where}: {why})")
    return lines


_ROLES = {
    "leader": "this hub leads its pool (followers read from its multiplexer port)",
    "follower": "this hub follows a leader (the cloud when none is usable)",
    "cloud": "this hub reads pool-scoped resources from the cloud",
}


def _synced(resource: Mapping[str, Any], now: float) -> str:
    if resource.get("synced"):
        return "yes"
    stale = resource.get("staleSince")
    return f"no (stale since {_ago(_seconds_since(stale, now))})" if stale else "no"


def pool_lines(pool: Mapping[str, Any], now: float) -> list[str]:
    """The pool section. A resource read through the hub while no apiserver is healthy is not
    synced and read from the cache (the hub says so: ``staleSince``, ``readFrom: cache``)."""
    name = pool.get("nodePool")
    where = f" (pool {name})" if name else ""
    role = str(pool.get("role") or "off")
    lines = ["", f"POOL{where}  {_ROLES.get(role) or pool.get('note') or role}"]
    leaders = pool.get("leaders") or []
    if leaders:
        shown = ", ".join(
            f"{x.get('node')}/{x.get('address')} ({'usable' if x.get('usable') else 'unusable'})"
            for x in leaders
        )
        lines.append(f"  leaders: {shown}")
    resources = pool.get("resources") or []
    if resources:
        rows = [["RESOURCE", "SYNCED", "OBJECTS", "CLIENTS", "READ FROM", "LAST ERROR"]]
        for r in resources:
            rows.append(
                [
                    str(r.get("resource")),
                    _synced(r, now),
                    str(r.get("objects", 0)),
                    str(r.get("clients", 0)),
                    str(r.get("readFrom") or "-"),
                    str(r.get("lastError") or "-"),
                ]
            )
        lines += _table(rows)
    return lines


def discovery_lines(agent: Mapping[str, Any] | None, source: str, problem: str = "") -> list[str]:
    lines = ["", f"DISCOVERY  ({source})"]
    if agent is None:
        lines.append(f"  no discovery agent answered{': ' + problem if problem else ''}")
        return lines
    socket = agent.get("kubeletSocket") or {}
    present = socket.get("present")
    if present is None:
        state = "-"
    else:
        state = "present" if present else "MISSING: device plugins wait for kubelet"
    lines.append(f"  kubelet socket {socket.get('path', '-')}: {state}")
    handlers = agent.get("handlers") or []
    shown = ", ".join(f"{h.get('name')} ({h.get('endpoints', 0)})" for h in handlers)
    lines.append(f"  handlers (endpoints): {shown or 'none registered'}")
    rows = [["CONFIGURATION", "HANDLER", "DEVICES", "SLOTS IN USE"]]
    for config in agent.get("configurations") or []:
        instances = config.get("instances") or []
        handler = str(config.get("handler") or "-")
        if config.get("handler") and not config.get("handlerRegistered"):
            handler += " (NOT REGISTERED)"
        used = sum(int(i.get("slotsInUse", 0)) for i in instances)
        total = sum(int(i.get("slots", 0)) for i in instances)
        rows.append(
            [
                f"{config.get('namespace', '-')}/{config.get('name', '-')}",
                handler,
                str(len(instances)),
                f"{used}/{total}",
            ]
        )
    if len(rows) == 1:
        lines.append("  no Configurations")
    else:
        lines += _table(rows)
    return lines


def render(
    hub: Mapping[str, Any] | None,
    hub_url: str,
    now: float,
    *,
    hub_problem: str = "",
    agent: Mapping[str, Any] | None = None,
    agent_source: str = "",
    agent_problem: str = "",
) -> str:
    hub, agent = visible.tree(hub), visible.tree(agent)
    hub_url, hub_problem = visible.text(hub_url), visible.text(hub_problem)
    agent_source, agent_problem = visible.text(agent_source), visible.text(agent_problem)
    if hub is None:
        lines = [f"edgehub hub: no answer from {hub_url}: {hub_problem}"]
    else:
        lines = hub_lines(hub, hub_url, now)
    lines += discovery_lines(agent, agent_source, agent_problem)
    return "\n".join(lines) + "\n"
