"""Pure: what a fleet bench reads from Prometheus text (kube-apiserver's ``/metrics``, a hub's,
a hollow kubelet's): a few families, summed the way the figures need them.

Only the lines of the wanted families are parsed (``select``), so a multi-megabyte
kube-apiserver exposition costs one pass over its lines. Label values are unescaped as the
text format writes them (``\\\\``, ``\\"``, ``\\n``).

- ``Scrape`` holds one reading: ``{(family, labels): value}``.
- ``watches``: ``apiserver_longrunning_requests{verb="WATCH"}`` per resource (summed over
  group, version, scope and component): the watches open now.
- ``requests``: ``apiserver_request_total`` per (verb, resource, code); ``delta`` between two
  readings (a counter reset, as after an apiserver restart, counts from zero: never negative).
- ``rest_client_codes``: client-go's ``rest_client_requests_total`` per code (a hollow kubelet's
  requests and what it was answered, 429 included).

PURE: no I/O.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Iterable, Mapping

Labels = tuple[tuple[str, str], ...]
Key = tuple[str, Labels]

_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

REQUESTS = "apiserver_request_total"
LONGRUNNING = "apiserver_longrunning_requests"
REJECTED = "apiserver_flowcontrol_rejected_requests_total"
REST_CLIENT = "rest_client_requests_total"
POOL_RESOURCES = ("services", "endpointslices")


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], value)


def parse_line(line: str) -> tuple[str, Labels, float] | None:
    """``(family, labels, value)`` of one sample line; None for comments, blanks and lines that
    do not parse (the reader never fails on one odd line)."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    brace = line.find("{")
    if brace >= 0:
        close = line.rfind("}")
        if close < brace:
            return None
        name = line[:brace]
        labels = tuple(
            sorted((k, _unescape(v)) for k, v in _LABEL.findall(line[brace + 1 : close]))
        )
        rest = line[close + 1 :].split()
    else:
        parts = line.split()
        name, labels, rest = parts[0], (), parts[1:]
    if not rest:
        return None
    try:
        value = float(rest[0])
    except ValueError:
        return None
    if math.isnan(value):
        return None
    return name, labels, value


@dataclasses.dataclass(frozen=True, slots=True)
class Scrape:
    values: Mapping[Key, float]

    def get(self, family: str, **labels: str) -> float:
        """The sum of ``family``'s samples whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (name, ls), v in self.values.items() if name == family and want <= set(ls))


def select(text: str, families: Iterable[str]) -> Scrape:
    """The samples of ``families`` (exact family names) in exposition ``text``."""
    wanted = tuple(families)
    prefixes = tuple(f"{f}{{" for f in wanted) + tuple(f"{f} " for f in wanted)
    values: dict[Key, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        parsed = parse_line(line)
        if parsed is not None:
            name, labels, value = parsed
            values[(name, labels)] = values.get((name, labels), 0.0) + value
    return Scrape(values)


def watches(scrape: Scrape) -> dict[str, float]:
    """Open WATCH requests per resource (``apiserver_longrunning_requests``)."""
    out: dict[str, float] = collections.defaultdict(float)
    for (name, labels), value in scrape.values.items():
        d = dict(labels)
        if name == LONGRUNNING and d.get("verb") == "WATCH":
            out[d.get("resource", "")] += value
    return dict(out)


def pool_watches(scrape: Scrape) -> float:
    """Services + EndpointSlices watches open now."""
    w = watches(scrape)
    return sum(w.get(r, 0.0) for r in POOL_RESOURCES)


RequestKey = tuple[str, str, str]
"""(verb, resource, code)."""


def requests(scrape: Scrape) -> dict[RequestKey, float]:
    out: dict[RequestKey, float] = collections.defaultdict(float)
    for (name, labels), value in scrape.values.items():
        if name != REQUESTS:
            continue
        d = dict(labels)
        resource = d.get("resource", "")
        if d.get("subresource"):
            resource = f"{resource}/{d['subresource']}"
        out[(d.get("verb", ""), resource, d.get("code", ""))] += value
    return dict(out)


def delta(
    before: Mapping[RequestKey, float], after: Mapping[RequestKey, float]
) -> dict[RequestKey, float]:
    """What the counters grew by; a counter that went down (a restarted apiserver) counts from
    zero, so no entry is negative; zero entries are left out."""
    out: dict[RequestKey, float] = {}
    for key, now in after.items():
        was = before.get(key, 0.0)
        grew = now - was if now >= was else now
        if grew > 0:
            out[key] = grew
    return out


def total(
    counts: Mapping[RequestKey, float], *, code: str | None = None, verb: str | None = None
) -> float:
    return sum(
        v
        for (vb, _, c), v in counts.items()
        if (code is None or c == code) and (verb is None or vb == verb)
    )


def by_verb_resource(counts: Mapping[RequestKey, float]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = collections.defaultdict(float)
    for (verb, resource, _), value in counts.items():
        out[(verb, resource)] += value
    return dict(out)


def rest_client_codes(scrape: Scrape) -> dict[str, float]:
    """client-go's requests per answer code (``rest_client_requests_total``)."""
    out: dict[str, float] = collections.defaultdict(float)
    for (name, labels), value in scrape.values.items():
        if name == REST_CLIENT:
            out[dict(labels).get("code", "")] += value
    return dict(out)


def peak_rate(points: Iterable[tuple[float, float]]) -> float:
    """The highest rate between consecutive ``(time, counter total)`` points (per second);
    a counter that went down (a restart) restarts from zero; 0.0 with fewer than two points."""
    best = 0.0
    previous: tuple[float, float] | None = None
    for t, value in points:
        if previous is not None and t > previous[0]:
            grew = value - previous[1] if value >= previous[1] else value
            best = max(best, grew / (t - previous[0]))
        previous = (t, value)
    return best
