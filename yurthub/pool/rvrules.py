"""resourceVersion rules of list and watch requests, as kube-apiserver's watch cache applies
them (k8s ``ValidateListOptions`` and ``cacher.Watch``/``GetList``).

PURE: query values in, a plan (or a ``Status`` to answer, or ``Bypass``) out.

Lists:
- ``resourceVersionMatch`` needs ``resourceVersion``, is ``Exact`` or ``NotOlderThan``, never
  with ``continue``, ``Exact`` never with ``"0"``; ``sendInitialEvents`` is forbidden (422).
- ``""`` and ``"0"``: the current state. Difference from kube-apiserver (same as YurtHub,
  which forces ``"0"``): ``""`` asks the apiserver for a consistent read; the multiplexer
  answers from memory, which trails the cloud by the watch's latency.
- ``N`` (``NotOlderThan`` or no match): a state at least as new as N; the caller waits for the
  store to catch up (3 s, as the watch cache) and else answers 504 "Too large resource
  version" with ``Retry-After: 1``.
- ``N`` with ``Exact``: served only when the store is exactly at N; any other N is passed to
  the ordinary proxy path (the apiserver keeps old states, the multiplexer does not).
- ``continue``: passed to the ordinary proxy path (the multiplexer never hands out tokens).
  ``limit`` is ignored: every list is answered whole, as the watch cache does for
  ``resourceVersion=0`` (API conventions let a server return all results).

Watches:
- ``sendInitialEvents`` (true or false) needs ``resourceVersionMatch=NotOlderThan``; the match
  without ``sendInitialEvents`` is forbidden (422).
- ``sendInitialEvents=true``: the current state as ADDED events (once the store is at least at
  N, when N is given), then, with ``allowWatchBookmarks``, a BOOKMARK annotated
  ``k8s.io/initial-events-end``, then changes (client-go's streaming lists).
- ``sendInitialEvents=false``: changes after N, or after now for ``""``/``"0"``.
- neither: ``""``/``"0"`` -> the current state as ADDED events then changes; ``N`` -> changes
  after N; N older than the store's history -> an ERROR event with a 410 Expired Status.
"""

from __future__ import annotations

import dataclasses

from yurthub import statuses

EXACT = "Exact"
NOT_OLDER_THAN = "NotOlderThan"
FRESHNESS_WAIT = 3.0
"""Seconds a request may wait for the store to reach its resourceVersion (the watch cache's)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """The list/watch options of one request, as sent (``send_initial_events`` None: absent)."""

    watch: bool
    resource_version: str = ""
    resource_version_match: str = ""
    send_initial_events: bool | None = None
    allow_watch_bookmarks: bool = False
    continue_token: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ListPlan:
    min_rv: int = 0
    """Answer once the store is at least here (0: at once)."""
    exact: int | None = None
    """Answer only if the store is exactly here (else ``Bypass``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class WatchPlan:
    initial: bool
    """Send the current state as ADDED events first."""
    initial_end_bookmark: bool = False
    """Then a BOOKMARK annotated ``k8s.io/initial-events-end``."""
    min_rv: int = 0
    """Wait until the store is at least here before the initial state (0: at once)."""
    since: int | None = None
    """Changes after this resourceVersion; None with ``initial`` = after the state sent,
    None without it = after the current one."""


@dataclasses.dataclass(frozen=True, slots=True)
class Bypass:
    """Not for the multiplexer: the ordinary proxy path answers (and says what it thinks)."""

    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class Refuse:
    status: statuses.Status


Plan = ListPlan | WatchPlan | Bypass | Refuse


def plan(options: Options) -> Plan:
    errors = _validate(options)
    if errors:
        joined = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        return Refuse(
            statuses.failure(
                422, f'ListOptions.meta.k8s.io "" is invalid: {joined}', reason="Invalid"
            )
        )
    rv_text = options.resource_version
    try:
        rv = parse(rv_text)
    except ValueError:
        return Refuse(
            statuses.failure(
                400,
                f"resourceVersion: Invalid value: {rv_text[:64]!r}: not an unsigned integer",
            )
        )
    if not options.watch:
        if options.continue_token:
            return Bypass("a continue token (the multiplexer does not page)")
        if rv and options.resource_version_match == EXACT:
            return ListPlan(exact=rv)
        return ListPlan(min_rv=rv)
    if options.send_initial_events is True:
        return WatchPlan(
            initial=True, initial_end_bookmark=options.allow_watch_bookmarks, min_rv=rv
        )
    if options.send_initial_events is False:
        return WatchPlan(initial=False, since=rv or None)
    if rv:
        return WatchPlan(initial=False, since=rv)
    return WatchPlan(initial=True)


def parse(text: str) -> int:
    """``""``/``"0"`` -> 0; a decimal unsigned integer -> its value; else ValueError."""
    if text in ("", "0"):
        return 0
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise ValueError(text)
    value = int(text)
    if value >= 1 << 64:
        raise ValueError(text)
    return value


def too_large(wanted: int, current: int) -> statuses.Status:
    """The watch cache's answer when the store did not reach ``wanted`` in time (504)."""
    return statuses.failure(
        504,
        f"Too large resource version: {wanted}, current: {current}",
        reason="Timeout",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def too_old(wanted: int, oldest: int) -> statuses.Status:
    """A watch from before the store's history (410 Expired, sent as an ERROR event)."""
    return statuses.failure(410, f"too old resource version: {wanted} ({oldest})", reason="Expired")


def _validate(o: Options) -> list[str]:
    errors: list[str] = []
    match = o.resource_version_match
    if o.watch:
        if o.send_initial_events is not None and match != NOT_OLDER_THAN:
            errors.append(
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                f"resourceVersionMatch to {NOT_OLDER_THAN}"
            )
        if match:
            if o.send_initial_events is None:
                errors.append(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for "
                    "watch unless sendInitialEvents is provided"
                )
            if match != NOT_OLDER_THAN:
                errors.append(
                    f'resourceVersionMatch: Unsupported value: "{match[:32]}": supported '
                    f'values: "{NOT_OLDER_THAN}"'
                )
            if o.continue_token:
                errors.append(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when "
                    "continue is provided"
                )
        return errors
    if match:
        if not o.resource_version:
            errors.append(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
                "resourceVersion is provided"
            )
        if o.continue_token:
            errors.append(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when "
                "continue is provided"
            )
        if match not in (EXACT, NOT_OLDER_THAN):
            errors.append(
                f'resourceVersionMatch: Unsupported value: "{match[:32]}": supported values: '
                f'"{EXACT}", "{NOT_OLDER_THAN}", ""'
            )
        if match == EXACT and o.resource_version == "0":
            errors.append(
                'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for '
                'resourceVersion "0"'
            )
    if o.send_initial_events is not None:
        errors.append("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list")
    return errors
