"""One outage as the hub saw it, bounded however long it lasts; its summaries.

PURE: values in, values out; the time is passed in (``Instant``). ``recording`` feeds a record
while the outage lasts, ``history`` stores it (``to_stored``/``from_stored``), ``posting``
sends ``event`` after the heal, ``GET /v1/outages`` shows ``view``.

Two clocks, each for what it can do:

- **how long** comes from the monotonic clock (``CLOCK_BOOTTIME``: it counts a suspend too and
  never steps): within one boot a record keeps the moment its current segment began, so a hub
  restarted during the outage (same boot id) counts the time it was away exactly. A reboot
  starts that clock anew: the record then adds what it had counted up to its last save and
  goes on from the new boot; the time the node was off is not counted (``unmeasured``, shown as
  "at least");
- **when** (``began``, ``ended``, a token's issue and expiry) is the wall clock's reading at
  that moment, for display only: nothing is ordered, capped, named or resumed by it (a node
  without a battery-backed clock boots in 1970, NTP steps the clock).

What a record holds:

- its ``id``: random, given by the caller (the Event's name comes from it, so one outage is one
  Event however often the hub restarts or retries; never the start time, which repeats on a
  node whose clock restarts at the same moment every boot);
- when it began and ended (wall), how long it lasted (monotonic);
- its ``cause`` when it began (``causes.Cause``) and the failing server's words, each server's
  last reason (at most ``MAX_SERVERS``), and the failed probes counted per cause (a closed set);
- every answer the hub gave meanwhile, per (component, verb, resource): answered (a 2xx or 3xx
  from the cache, the pool or the hub) and refused (any other status, per code, the hub's own
  refusals too: 429, 400, 403, ...). At most ``MAX_KEYS`` keys; later new keys are counted
  under ``other``/``other``/``other``. At most ``MAX_CODES`` codes per key, then ``other``.
  Label values arrive bounded (``labels.Bounds``);
- answers per source (``cloud``, ``cache``, ``pool``, ``hub``; at most ``MAX_SOURCES``);
- the ServiceAccount tokens the hub issued offline: namespace, account, pod, audiences and
  expiry (never the token), at most ``MAX_TOKENS`` listed and all counted;
- how often the hub restarted during it, and how many offline Events the journal dropped;
- how often the link came back within the flap window and dropped again (``flaps``, with the
  up-times summed: ``flap_seconds``; ``reopen``), and the monotonic reading at its end
  (``until``) the window is measured from (``flapping`` decides). Its length then runs from
  its first beginning to its final end, the brief up-times counted in it: the record's
  ``began`` and ``ended`` say so, and the link was not usable between drops that close.

So a record is a few KiB in practice and at most about 150 KiB (every name at its longest),
after an hour or a month. Nothing in it is secret:
names of components, resources, ServiceAccounts and pods, counts and times (the sealed cache
keeps such names in its keys unencrypted too).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from yurthub import eventnames
from yurthub.outages import causes

MAX_KEYS = 128
MAX_CODES = 8
MAX_SOURCES = 8
MAX_TOKENS = 64
MAX_SERVERS = 16
MAX_AUDIENCES = 4
MAX_TEXT = 300
MAX_MESSAGE = 1024
"""An Event's message at most (kubelet's recorder cuts its messages there too)."""
OTHER = "other"
ABORTED = "aborted"
"""The code of a request that ended without an answer (the client went away)."""
EVENT_REASON = "EdgeOutageEnded"
EVENT_COMPONENT = "edgehub"
POSTED = "posted"
"""``Outage.event`` once the cloud holds the Event."""
FLAP_WINDOW = 30.0
"""Seconds the link must stay up after an outage before it is over for good (``flapping``;
the default of ``--outage-flap-window-seconds``)."""


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclasses.dataclass(frozen=True, slots=True)
class Instant:
    """One moment as the hub reads its clocks (``recording.SystemClock``; tests pass their
    own, stepping each as they like)."""

    wall: float
    """Unix seconds (``time.time``): shown, never compared."""
    boot: str
    """The kernel's boot id: ``mono`` readings compare only within one boot."""
    mono: float
    """``CLOCK_BOOTTIME`` seconds: monotonic within ``boot``."""


@dataclasses.dataclass(slots=True)
class Tally:
    answered: int = 0
    refused: int = 0
    codes: dict[str, int] = dataclasses.field(default_factory=dict)
    """Refused answers per status code (``aborted``: no answer; ``other`` past the bound)."""

    def add(self, code: int) -> None:
        if 200 <= code < 400:
            self.answered += 1
            return
        self.refused += 1
        name = str(code) if code else ABORTED
        if name not in self.codes and len(self.codes) >= MAX_CODES:
            name = OTHER
        self.codes[name] = self.codes.get(name, 0) + 1


@dataclasses.dataclass(frozen=True, slots=True)
class Token:
    """A ServiceAccount token the hub issued offline (what it was for, never the token)."""

    namespace: str
    service_account: str
    pod: str
    audiences: tuple[str, ...]
    issued: float
    expires: float


Key = tuple[str, str, str]
"""(component, verb, resource[/subresource])."""
OTHER_KEY: Key = (OTHER, OTHER, OTHER)


@dataclasses.dataclass(slots=True)
class Outage:
    id: str
    began: float
    """Wall clock when it began (display only)."""
    ended: float | None = None
    """Wall clock when it ended (display only); None while it lasts."""
    boot: str = ""
    """The boot the current segment runs in ("": unknown, a record from an older hub)."""
    since: float = 0.0
    """``Instant.mono`` when the current segment began (in ``boot``)."""
    seen: float = 0.0
    """``Instant.mono`` when the record was last saved (in ``boot``): how far it got, should
    the node reboot."""
    prior: float = 0.0
    """Seconds counted in segments of earlier boots."""
    lasted: float | None = None
    """How long it lasted, once ended (seconds, monotonic)."""
    unmeasured: int = 0
    """Gaps not counted in its length: a reboot during it (the time the node was off), or a
    record from a hub that kept no monotonic time. Its length is then "at least"."""
    cause: str = causes.Cause.OTHER.value
    reason: str = ""
    """The failing server and why, in words, when the outage began."""
    causes: dict[str, int] = dataclasses.field(default_factory=dict)
    servers: dict[str, str] = dataclasses.field(default_factory=dict)
    tallies: dict[Key, Tally] = dataclasses.field(default_factory=dict)
    sources: dict[str, int] = dataclasses.field(default_factory=dict)
    tokens: list[Token] = dataclasses.field(default_factory=list)
    tokens_issued: int = 0
    restarts: int = 0
    until: float | None = None
    """``Instant.mono`` when it ended (in ``boot``; None while it lasts, or a record from an
    older hub): where its flap window (``flapping``) is measured from."""
    flaps: int = 0
    """How often the link came back and dropped again within the flap window: each time this
    outage went on (``reopen``) instead of a new one beginning."""
    flap_seconds: float = 0.0
    """The brief up-times between those drops, summed (counted in its length too)."""
    dropped_before: int = 0
    """Offline Events the journal had dropped (and not told) when the outage began."""
    events_dropped: int = 0
    event: str = ""
    """The Event's state: "" not posted yet, ``POSTED``, or why the cloud refused it."""
    seq: int = dataclasses.field(default=0, compare=False)
    """Its place in the history (``history``'s insertion sequence; 0: not stored yet). Not in
    the record: the row holds it."""
    in_flight: int = dataclasses.field(default=0, compare=False)
    """Requests begun during the outage and not answered yet (not stored: after a restart
    there are none)."""

    # --- while it lasts -------------------------------------------------------------------

    def failed(self, server: str, cause: str, reason: str) -> None:
        """A failed probe of ``server``."""
        self.causes[cause] = self.causes.get(cause, 0) + 1
        if server in self.servers or len(self.servers) < MAX_SERVERS:
            self.servers[server] = _cut(reason)

    def answered(self, key: Key, source: str, code: int) -> None:
        tally = self.tallies.get(key)
        if tally is None:
            if len(self.tallies) >= MAX_KEYS:
                key = OTHER_KEY
                tally = self.tallies.get(key)
            if tally is None:
                tally = self.tallies[key] = Tally()
        tally.add(code)
        if source not in self.sources and len(self.sources) >= MAX_SOURCES:
            source = OTHER
        self.sources[source] = self.sources.get(source, 0) + 1

    def issued(self, token: Token) -> None:
        self.tokens_issued += 1
        if len(self.tokens) < MAX_TOKENS:
            self.tokens.append(
                Token(
                    _cut(token.namespace, 253),
                    _cut(token.service_account, 253),
                    _cut(token.pod, 253),
                    tuple(_cut(a, 253) for a in token.audiences[:MAX_AUDIENCES]),
                    token.issued,
                    token.expires,
                )
            )

    def touch(self, now: Instant) -> None:
        """Note how far the outage got (before a save): what a reboot keeps of its length."""
        if self.lasted is None and now.boot == self.boot and now.mono >= self.since:
            self.seen = now.mono

    def resume(self, now: Instant) -> None:
        """A restarted hub goes on with this outage (its stored state says it is ongoing).
        Restarted within the same boot, the time the hub was away is counted (monotonic);
        across a reboot (or from a record without monotonic time) what was counted up to the
        last save is kept and counting goes on from ``now``."""
        self.restarts += 1
        if now.boot == self.boot and self.boot and now.mono >= self.seen >= self.since:
            return
        self.prior += max(0.0, self.seen - self.since) if self.boot else 0.0
        self.unmeasured += 1
        self.boot, self.since, self.seen = now.boot, now.mono, now.mono

    def end(self, now: Instant, dropped_now: int) -> None:
        """The outage ended at ``now``; ``dropped_now``: the journal's untold drops then."""
        self.lasted = self.seconds(now)
        self.ended = max(now.wall, self.began)  # shown: a clock stepped back shows no end first
        self.until = now.mono if now.boot == self.boot else None
        self.events_dropped = max(0, dropped_now - self.dropped_before)

    def reopen(self, now: Instant) -> None:
        """The link dropped again at ``now``, within the flap window after this outage ended
        (``flapping.on_drop`` decided, so ``now`` is in its ``boot``): it goes on. Its length
        runs on from its first beginning, the brief up-time counted in it (``flap_seconds``
        says how much); its counts keep accumulating."""
        if self.until is not None and now.boot == self.boot and now.mono >= self.until:
            self.flap_seconds += now.mono - self.until
            self.seen = now.mono
        else:  # not measurable (never so when decided by ``flapping``): counted from now on
            self.prior = self.seconds(now)
            self.boot, self.since, self.seen = now.boot, now.mono, now.mono
        self.flaps += 1
        self.ended = self.lasted = self.until = None

    def abandon(self) -> None:
        """End a stale ongoing record (one a hub left behind a newer one: a failed save) as
        far as it got."""
        if self.lasted is None:
            self.lasted = self.prior + max(0.0, self.seen - self.since)
            self.ended = self.began + self.lasted

    # --- reading it -----------------------------------------------------------------------

    def seconds(self, now: Instant) -> float:
        """How long it lasted, or has lasted by ``now`` (monotonic; never negative)."""
        if self.lasted is not None:
            return self.lasted
        if now.boot == self.boot and now.mono >= self.since:
            return self.prior + (now.mono - self.since)
        return self.prior + max(0.0, self.seen - self.since)

    @property
    def at_least(self) -> bool:
        """Its length misses a gap (``unmeasured``): shown as "at least"."""
        return self.unmeasured > 0

    @property
    def answered_total(self) -> int:
        return sum(t.answered for t in self.tallies.values())

    @property
    def refused_total(self) -> int:
        return sum(t.refused for t in self.tallies.values())

    @property
    def events_recorded(self) -> int:
        """Event creates and patches answered offline (the journal keeps them for the cloud)."""
        return sum(
            t.answered
            for (_, verb, resource), t in self.tallies.items()
            if resource == "events" and verb in ("create", "patch")
        )


def begin(now: Instant, outage_id: str, cause: str, reason: str, dropped_before: int = 0) -> Outage:
    """A new outage at ``now``; ``outage_id``: unique (random: ``new_id``)."""
    return Outage(
        id=outage_id,
        began=now.wall,
        boot=now.boot,
        since=now.mono,
        seen=now.mono,
        cause=cause,
        reason=_cut(reason),
        dropped_before=dropped_before,
    )


# --- words --------------------------------------------------------------------------------


_LATEST = 253402300799.0  # 9999-12-31T23:59:59Z


def timestamp(when: float) -> str:
    """RFC 3339, seconds, UTC (an Event's ``firstTimestamp``); a reading outside years
    1970-9999 (a clock gone wrong, a damaged record) is shown at the nearest end."""
    when = min(max(when, 0.0), _LATEST) if when == when else 0.0
    return datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lasted(seconds: float) -> str:
    """``45s``, ``5m12s``, ``3h04m``, ``2d03h``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def length(outage: Outage, now: Instant) -> str:
    """How long, in words: ``3h12m``, ``at least 3h12m`` (a gap not counted)."""
    text = lasted(outage.seconds(now))
    return f"at least {text}" if outage.at_least else text


def cause_words(outage: Outage) -> str:
    """The cause when it began, and the others seen later (most frequent first)."""
    text = causes.words(outage.cause)
    later = sorted((c for c in outage.causes if c != outage.cause), key=lambda c: -outage.causes[c])
    if later:
        text += f" (later also: {', '.join(causes.words(c) for c in later[:3])})"
    return text


def _n(count: int, thing: str) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{count} {thing}" if count == 1 else f"{count} {thing}s"


def _top(counts: Mapping[str, int], limit: int) -> str:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [f"{name} {n}" for name, n in ranked[:limit] if n]
    if len(ranked) > limit:
        shown.append(f"{len(ranked) - limit} more")
    return ", ".join(shown)


def summary(outage: Outage, node: str, flap_window: float = FLAP_WINDOW) -> str:
    """The Event's message (at most ``MAX_MESSAGE`` characters); ``flap_window``: the hub's
    (``flapping``), named when the link came back briefly."""
    assert outage.ended is not None and outage.lasted is not None
    parts = [
        f"Node {node} could not reach the cloud for {length(outage, _ENDED)}, "
        f"from {timestamp(outage.began)} to {timestamp(outage.ended)}: {cause_words(outage)}."
    ]
    if outage.at_least:
        parts.append("The node rebooted during it: the time it was off is not counted.")
    per_component: dict[str, int] = {}
    codes: dict[str, int] = {}
    for (component, _, _), tally in outage.tallies.items():
        per_component[component] = per_component.get(component, 0) + tally.answered
        for code, n in tally.codes.items():
            codes[code] = codes.get(code, 0) + n
    answered, refused = outage.answered_total, outage.refused_total
    meanwhile = f"The hub answered {_n(answered, 'request')} locally"
    if answered:
        meanwhile += f" ({_top(per_component, 4)})"
    meanwhile += f" and refused {refused}"
    if refused:
        meanwhile += f" ({_top(codes, 4)})"
    parts.append(meanwhile + ".")
    if outage.tokens_issued:
        accounts = {f"{t.namespace}/{t.service_account}" for t in outage.tokens}
        parts.append(
            f"It issued {_n(outage.tokens_issued, 'ServiceAccount token')} offline "
            f"({', '.join(sorted(accounts)[:3])}{', ...' if len(accounts) > 3 else ''})."
        )
    if outage.events_recorded or outage.events_dropped:
        parts.append(
            f"{_n(outage.events_recorded, 'Event')} recorded offline, "
            f"{outage.events_dropped} dropped over the journal's bounds."
        )
    if outage.restarts:
        times = "once" if outage.restarts == 1 else f"{outage.restarts} times"
        parts.append(f"The hub restarted {times} during it.")
    if outage.flaps:
        times = "once" if outage.flaps == 1 else f"{outage.flaps} times"
        parts.append(
            f"The link came back {times} for less than {lasted(flap_window)} "
            f"({lasted(outage.flap_seconds)} in all, counted in its length)."
        )
    parts.append("On the node: edgehub status --history.")
    return _cut(" ".join(parts), MAX_MESSAGE)


_ENDED = Instant(0.0, "", 0.0)
"""Any instant: an ended outage's length is its own."""


def event_name(node: str, outage_id: str) -> str:
    """``<node>.edge-outage-<id>`` (``eventnames.on_node``: a valid name whatever the node's
    length): deterministic, so a retried or repeated post is a 409."""
    return eventnames.on_node(node, f"edge-outage-{outage_id}")


def event(outage: Outage, node: str, flap_window: float = FLAP_WINDOW) -> dict[str, Any]:
    """The Node Event summarising an ended outage (in ``default``, as kubelet records Node
    Events; the node's name as its uid, as kubelet does, which ``kubectl describe node``
    finds)."""
    assert outage.ended is not None
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(node, outage.id), "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": node, "uid": node, "apiVersion": "v1"},
        "reason": EVENT_REASON,
        "message": summary(outage, node, flap_window),
        "type": "Normal",
        "source": {"component": EVENT_COMPONENT, "host": node},
        "count": 1,
        "firstTimestamp": timestamp(outage.began),
        "lastTimestamp": timestamp(outage.ended),
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": node,
    }


# --- stored and shown -----------------------------------------------------------------------


def to_stored(outage: Outage) -> dict[str, Any]:
    """What ``history`` keeps (JSON)."""
    return {
        "id": outage.id,
        "began": outage.began,
        "ended": outage.ended,
        "boot": outage.boot,
        "since": outage.since,
        "seen": outage.seen,
        "prior": outage.prior,
        "lasted": outage.lasted,
        "unmeasured": outage.unmeasured,
        "cause": outage.cause,
        "reason": outage.reason,
        "causes": dict(outage.causes),
        "servers": dict(outage.servers),
        "answers": [
            [c, v, r, t.answered, t.refused, dict(t.codes)]
            for (c, v, r), t in outage.tallies.items()
        ],
        "sources": dict(outage.sources),
        "tokens": [
            [t.namespace, t.service_account, t.pod, list(t.audiences), t.issued, t.expires]
            for t in outage.tokens
        ],
        "tokensIssued": outage.tokens_issued,
        "restarts": outage.restarts,
        "until": outage.until,
        "flaps": outage.flaps,
        "flapSeconds": outage.flap_seconds,
        "droppedBefore": outage.dropped_before,
        "eventsDropped": outage.events_dropped,
        "event": outage.event,
    }


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    return value


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _counts(value: Any, limit: int) -> dict[str, int]:
    if not isinstance(value, dict):
        raise ValueError("not a map of counts")
    return {str(k): _int(v) for k, v in list(value.items())[:limit]}


def _servers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("not a map of servers")
    return {str(k): _cut(v) for k, v in list(value.items())[:MAX_SERVERS]}


def from_stored(data: Any) -> Outage:
    """A stored record read back; ``ValueError`` when it is not one (bounds re-applied)."""
    if not isinstance(data, dict):
        raise ValueError("an outage record must be a JSON object")
    try:
        ended = data.get("ended")
        began = _num(data["began"])
        lasted = data.get("lasted")
        if lasted is not None:
            lasted = max(0.0, _num(lasted))
        elif ended is not None:  # an older hub's record: its wall-clock length
            lasted = max(0.0, _num(ended) - began)
        outage = Outage(
            id=str(data["id"])[:32],
            began=began,
            ended=None if ended is None else _num(ended),
            boot=str(data.get("boot", ""))[:64],
            since=_num(data.get("since", 0.0)),
            seen=_num(data.get("seen", 0.0)),
            prior=max(0.0, _num(data.get("prior", 0.0))),
            lasted=lasted,
            unmeasured=_int(data.get("unmeasured", 0)),
            cause=str(data.get("cause", causes.Cause.OTHER.value))[:32],
            reason=_cut(data.get("reason", "")),
            causes=_counts(data.get("causes", {}), len(causes.Cause) + 1),
            servers=_servers(data.get("servers", {})),
            sources=_counts(data.get("sources", {}), MAX_SOURCES + 1),
            tokens_issued=_int(data.get("tokensIssued", 0)),
            restarts=_int(data.get("restarts", 0)),
            until=None if data.get("until") is None else _num(data["until"]),
            flaps=_int(data.get("flaps", 0)),
            flap_seconds=max(0.0, _num(data.get("flapSeconds", 0.0))),
            dropped_before=_int(data.get("droppedBefore", 0)),
            events_dropped=_int(data.get("eventsDropped", 0)),
            event=_cut(data.get("event", "")),
        )
        for row in list(data.get("answers", []))[: MAX_KEYS + 1]:
            component, verb, resource, answered, refused, codes = row
            outage.tallies[(str(component), str(verb), str(resource))] = Tally(
                _int(answered), _int(refused), _counts(codes, MAX_CODES + 1)
            )
        for row in list(data.get("tokens", []))[:MAX_TOKENS]:
            namespace, account, pod, audiences, issued, expires = row
            outage.tokens.append(
                Token(
                    str(namespace),
                    str(account),
                    str(pod),
                    tuple(str(a) for a in list(audiences)[:MAX_AUDIENCES]),
                    _num(issued),
                    _num(expires),
                )
            )
    except (KeyError, TypeError) as e:
        raise ValueError(f"not an outage record: {e}") from e
    return outage


def view(outage: Outage, now: Instant) -> dict[str, Any]:
    """What ``GET /v1/outages`` shows of one outage (``edgehub status --history``)."""
    ranked = sorted(
        outage.tallies.items(), key=lambda kv: (-(kv[1].answered + kv[1].refused), kv[0])
    )
    answers = [
        {
            "component": c,
            "verb": v,
            "resource": r,
            "answered": t.answered,
            "refused": t.refused,
            "refusedByCode": dict(sorted(t.codes.items())),
        }
        for (c, v, r), t in ranked
    ]
    return {
        "id": outage.id,
        "began": timestamp(outage.began),
        "ended": timestamp(outage.ended) if outage.ended is not None else None,
        "ongoing": outage.ended is None,
        "seconds": round(outage.seconds(now)),
        "atLeast": outage.at_least,
        "cause": outage.cause,
        "causeWords": cause_words(outage),
        "reason": outage.reason,
        "failedProbes": dict(sorted(outage.causes.items())),
        "servers": dict(outage.servers),
        "answered": outage.answered_total,
        "refused": outage.refused_total,
        "bySource": dict(sorted(outage.sources.items())),
        "answers": answers,
        "tokensIssued": outage.tokens_issued,
        "tokens": [
            {
                "namespace": t.namespace,
                "serviceAccount": t.service_account,
                "pod": t.pod,
                "audiences": list(t.audiences),
                "issued": timestamp(t.issued),
                "expires": timestamp(t.expires),
            }
            for t in outage.tokens
        ],
        "tokensNotListed": outage.tokens_issued - len(outage.tokens),
        "eventsRecorded": outage.events_recorded,
        "eventsDropped": outage.events_dropped,
        "hubRestarts": outage.restarts,
        "flaps": outage.flaps,
        "flapSeconds": round(outage.flap_seconds),
        "event": outage.event or ("pending" if outage.ended is not None else ""),
    }
