"""The outage lines of ``edgehub status``, and the screen of ``edgehub status --history``.

PURE: the hub's JSON in (``/v1/status``' ``outages`` section, ``GET /v1/outages``), text out
(table-tested in ``tests/unit/cli/test_status_outages.py``). Every field may be missing (an
older hub): shown as ``-``, never a crash. Every string is shown through ``visible``: a
server's reason or a refused Event's answer (an apiserver's words) cannot drive the terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edgehub import visible

DETAIL_ROWS = 12
"""Rows of (component, verb, resource) shown for the newest outage."""


def _table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def lasted(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def length(outage: Mapping[str, Any]) -> str:
    """How long, ``at least`` when a reboot's gap is not counted (``atLeast``)."""
    text = lasted(outage.get("seconds"))
    return f"at least {text}" if outage.get("atLeast") is True else text


def status_lines(section: Any) -> list[str]:
    """The ``OUTAGES`` lines of ``edgehub status``: the one going on, and the last."""
    section = visible.tree(section)
    if not isinstance(section, Mapping):
        return []
    ongoing, last = section.get("ongoing"), section.get("last")
    if not isinstance(ongoing, Mapping) and not isinstance(last, Mapping):
        return ["", "OUTAGES  none recorded"]
    lines = ["", "OUTAGES  (edgehub status --history)"]
    if isinstance(ongoing, Mapping):
        lines.append(
            f"  NOW: the cloud is unreachable since {ongoing.get('began', '-')} "
            f"({length(ongoing)}): {ongoing.get('causeWords', '-')}; "
            f"{ongoing.get('answered', 0)} answered locally, {ongoing.get('refused', 0)} refused"
            + _flapped(ongoing)
        )
    if isinstance(last, Mapping):
        lines.append(
            f"  last: {last.get('began', '-')} for {length(last)}: "
            f"{last.get('causeWords', '-')}{_flapped(last)} (Event: {last.get('event') or '-'})"
        )
    return lines


def _flapped(outage: Mapping[str, Any]) -> str:
    flaps = outage.get("flaps")
    if not isinstance(flaps, int) or isinstance(flaps, bool) or flaps <= 0:
        return ""
    return f"; the link came back {_times(flaps)} briefly"


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def _event(outage: Mapping[str, Any]) -> str:
    if outage.get("ongoing"):
        return "-"
    return str(outage.get("event") or "-")


def history(document: Mapping[str, Any] | None, url: str, problem: str = "") -> str:
    """The screen of ``edgehub status --history``."""
    document, url, problem = visible.tree(document), visible.text(url), visible.text(problem)
    if document is None:
        return f"edgehub hub: no outage history from {url}: {problem}\n"
    outages = [o for o in document.get("outages") or [] if isinstance(o, Mapping)]
    lines = [
        f"edgehub hub on node {document.get('node', '-')} ({url}): {len(outages)} outages "
        f"recorded (the last {document.get('limit', '-')} are kept)"
    ]
    if not outages:
        lines.append("  none: the hub has always reached an apiserver since it keeps a history")
        return "\n".join(lines) + "\n"
    rows = [
        ["BEGAN", "ENDED", "LASTED", "CAUSE", "FLAPS", "ANSWERED", "REFUSED", "TOKENS", "EVENT"]
    ]
    for o in outages:
        rows.append(
            [
                str(o.get("began", "-")),
                "ongoing" if o.get("ongoing") else str(o.get("ended") or "-"),
                lasted(o.get("seconds")) + ("+" if o.get("atLeast") is True else ""),
                str(o.get("cause", "-")),
                str(o.get("flaps", 0)),
                str(o.get("answered", 0)),
                str(o.get("refused", 0)),
                str(o.get("tokensIssued", 0)),
                _event(o),
            ]
        )
    lines += ["", *_table(rows)]
    if any(o.get("atLeast") is True for o in outages):
        lines.append("  +: at least (the node rebooted during it: its time off is not counted)")
    lines += detail_lines(outages[0])
    return "\n".join(lines) + "\n"


def detail_lines(outage: Mapping[str, Any]) -> list[str]:
    """The newest outage in detail: its causes, what was answered per component and verb, the
    tokens issued."""
    outage = visible.tree(outage)
    what = "ONGOING" if outage.get("ongoing") else "NEWEST"
    lines = [
        "",
        f"{what} OUTAGE  {outage.get('began', '-')}, {length(outage)}: "
        f"{outage.get('causeWords', '-')}",
    ]
    if outage.get("reason"):
        lines.append(f"  began with: {outage['reason']}")
    probes = outage.get("failedProbes")
    if isinstance(probes, Mapping) and probes:
        lines.append("  failed probes: " + ", ".join(f"{cause} {n}" for cause, n in probes.items()))
    sources = outage.get("bySource")
    if isinstance(sources, Mapping) and sources:
        lines.append("  answers by source: " + ", ".join(f"{s} {n}" for s, n in sources.items()))
    if outage.get("hubRestarts"):
        restarts = outage["hubRestarts"]
        times = "once" if restarts == 1 else f"{restarts} times"
        lines.append(f"  the hub restarted {times} during it")
    flaps = outage.get("flaps")
    if isinstance(flaps, int) and not isinstance(flaps, bool) and flaps > 0:
        lines.append(
            f"  the link came back {_times(flaps)} within the flap window "
            f"(up {lasted(outage.get('flapSeconds'))} in all, counted in its length)"
        )
    if outage.get("eventsRecorded") or outage.get("eventsDropped"):
        lines.append(
            f"  offline Events: {outage.get('eventsRecorded', 0)} recorded, "
            f"{outage.get('eventsDropped', 0)} dropped over the journal's bounds"
        )
    answers = [a for a in outage.get("answers") or [] if isinstance(a, Mapping)]
    if answers:
        rows = [["COMPONENT", "VERB", "RESOURCE", "ANSWERED", "REFUSED"]]
        for a in answers[:DETAIL_ROWS]:
            codes = a.get("refusedByCode")
            refused = str(a.get("refused", 0))
            if isinstance(codes, Mapping) and codes:
                refused += " (" + ", ".join(f"{c}: {n}" for c, n in codes.items()) + ")"
            rows.append(
                [
                    str(a.get("component", "-")),
                    str(a.get("verb", "-")),
                    str(a.get("resource") or "-"),
                    str(a.get("answered", 0)),
                    refused,
                ]
            )
        lines += _table(rows)
        if len(answers) > DETAIL_ROWS:
            lines.append(f"  ... {len(answers) - DETAIL_ROWS} more (-o json)")
    tokens = [t for t in outage.get("tokens") or [] if isinstance(t, Mapping)]
    if tokens:
        rows = [["TOKEN FOR", "POD", "AUDIENCES", "ISSUED", "EXPIRES"]]
        for t in tokens[:DETAIL_ROWS]:
            rows.append(
                [
                    f"{t.get('namespace', '-')}/{t.get('serviceAccount', '-')}",
                    str(t.get("pod") or "-"),
                    ",".join(str(a) for a in t.get("audiences") or []) or "-",
                    str(t.get("issued", "-")),
                    str(t.get("expires", "-")),
                ]
            )
        lines += _table(rows)
        more = int(outage.get("tokensIssued", 0) or 0) - min(len(tokens), DETAIL_ROWS)
        if more > 0:
            lines.append(f"  ... {more} more tokens issued (-o json lists up to the bound)")
    return lines
