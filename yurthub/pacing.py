"""When the hub's own list/watch loops go back to an apiserver after their watch ended.

PURE: a cause and the settings in, seconds out; randomness comes in as a number in [0, 1).

A fleet's hubs meet the same events at the same instant (a region's links healing, an
apiserver restarting, etcd compacting its history), so whatever each does next, all do
together. The loops (``following``, the pool's ``feeding``) therefore:

- **resume, never relist** when they can: a watch that ended for any reason but 410 Gone
  (the link dropped, the hub went offline and back, a 429, a 5xx, a body cut short) is opened
  again from the resourceVersion the loop holds. An apiserver that still has that version
  sends only what changed; a LIST of everything is asked for only after it said 410 (or
  before the first list). ``Pacer`` only says how long to wait before that next request;
- spread what must be listed again (``Cause.GONE``: a 410 after a compaction or an apiserver
  restart) over ``relist_spread`` seconds, uniformly: N hubs' relists land spread over that
  window, not in the same second. Meanwhile the loop keeps serving what it holds (a pool
  store, the filters' inputs), just not newer, and that lag is bounded by the spread. A pool's
  leader hub relisting its pool-scoped resources (``leading``) spreads over
  ``leader_relist_spread`` instead: a fleet has one or a few leaders a pool, not a hub a node,
  and every follower of the pool waits for that relist;
- honour the apiserver's pushback (``Cause.BUSY``: 429 Too Many Requests, which is also
  what API Priority and Fairness answers when a priority level's queues are full, or a 503
  that carries ``Retry-After``): wait the ``Retry-After`` seconds it asked for, bounded to
  [1, ``max_retry_after``] (a hostile or broken value cannot park a loop for a day, nor
  make it spin) and stretched by up to a quarter, so hubs told the same number do not come
  back in step. Without a Retry-After it is a failure;
- back off after any other failure (``Cause.FAILURE``: a transport error, a 5xx, a body
  that does not parse) exponentially, ``first_backoff`` doubling to ``max_backoff``,
  stretched by up to a half. A success resets it.

The clients' own watches, held open from the cache while offline, end after the heal at a
random moment within ``heal_spread`` (``localwatches``): each client then watches the
apiserver again from where it was, and a fleet's kubelets and kube-proxies do not all do so in
the same half second.

Defaults and why: ``heal_spread`` 5 s: a client's view lags the cloud by at most that after a
heal (kubelet's node status and lease are no watches and are not delayed), and a fleet's
resumed watches, about 45 a node, land over 5 s instead of the health poll's half second;
``relist_spread`` 10 s: a fleet's relist peak drops about tenfold against
"all in the same second" (hubs' heal detection is already spread over a second or two) while
a relisted store lags the cloud by 10 s at most, well within the ≤ 60 s the issue's
fleet target allows for every cache to equal the apiserver again; ``leader_relist_spread`` 2 s:
10,000 nodes in 100 pools relist 100 times (one leader a pool) over 2 s, 50 a second, where
without hubs 10,000 kube-proxies relist EndpointSlices at once, and a pool's followers see the
cloud's state again within seconds of the 410 instead of up to ten; ``max_retry_after`` 60 s:
kube-apiserver's APF asks for 1 s, a restarting apiserver's initialising watch cache for 1 s,
a proxy may ask for more, a minute is the most a hub may stay behind on its own loops
(kubelet's own requests pass through, see ``docs/operating.md``); 0.5 s doubling to 30 s is
client-go's reflector back-off.
"""

from __future__ import annotations

import dataclasses
import enum

MIN_RETRY_AFTER = 1.0
"""Seconds: a ``Retry-After`` of 0 (or less) is taken as 1 (a loop must not spin)."""
WATCH_OVERRUN = 30.0
"""Seconds a loop's watch may outlive the ``timeoutSeconds`` it asked for before the loop ends
it itself (``watch_bound``)."""


def watch_bound(timeout_seconds: int, overrun: float = WATCH_OVERRUN) -> float:
    """How long a loop waits for its watch, asked to end after ``timeout_seconds``, to end.

    The apiserver ends a watch at its ``timeoutSeconds``; so does the hub's proxy, answering
    online or from its cache (``WATCH_DEADLINE_GRACE`` later at most). A watch still open
    ``overrun`` seconds after that lost its end on the way: a connection nothing will
    ever write to again (a peer gone without a FIN or RST, an event loop's transport bug). The
    loop, ending it then, resumes from the version it holds instead of waiting forever for an
    event that cannot come."""
    return timeout_seconds + overrun


class Cause(enum.Enum):
    GONE = "gone"
    """410: the version held is too old; the next request is a list."""
    BUSY = "busy"
    """429, or 503 with ``Retry-After``: the apiserver asks to come back later."""
    FAILURE = "failure"
    """Anything else that failed (transport, 5xx, a body that does not parse)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    relist_spread: float = 10.0
    """Seconds over which a relist after 410 is spread (0: at once)."""
    leader_relist_spread: float = 2.0
    """The same for a pool leader's relist of a pool-scoped resource (``leading``)."""
    max_retry_after: float = 60.0
    """The most seconds a ``Retry-After`` is honoured for."""
    heal_spread: float = 5.0
    """Seconds within which each client watch held open offline ends after the cloud is back
    (``localwatches``; 0: at once)."""
    first_backoff: float = 0.5
    max_backoff: float = 30.0


def retry_after(value: str | None) -> float | None:
    """The seconds of a ``Retry-After`` header (kube-apiserver sends whole seconds), or None
    when absent or not a number (an HTTP-date is not what an apiserver sends: treated as
    absent). PURE."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > 16:
        return None
    try:
        seconds = float(text)
    except ValueError:
        return None
    if seconds != seconds or seconds in (float("inf"), float("-inf")):  # NaN, inf
        return None
    return seconds


def delay(
    cause: Cause,
    *,
    attempt: int,
    rand: float,
    settings: Settings,
    retry_after_seconds: float | None = None,
    leading: bool = False,
) -> float:
    """Seconds to wait before the next request of a loop. ``attempt``: failures in a row
    before this one (0: the first); ``rand`` in [0, 1); ``leading``: the loop is a pool
    leader's feeder of a pool-scoped resource. PURE."""
    rand = min(max(rand, 0.0), 1.0)
    if cause is Cause.GONE:
        spread = settings.leader_relist_spread if leading else settings.relist_spread
        return spread * rand
    if cause is Cause.BUSY and retry_after_seconds is not None:
        asked = min(max(retry_after_seconds, MIN_RETRY_AFTER), settings.max_retry_after)
        return asked * (1 + rand / 4)
    base = settings.first_backoff * float(2 ** min(max(attempt, 0), 32))
    return min(base, settings.max_backoff) * (1 + rand / 2)


class Pacer:
    """One loop's pacing: counts the failures in a row (``delay``'s ``attempt``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.failures = 0

    def succeeded(self) -> None:
        """A request succeeded (a list, a watch that delivered something): start over."""
        self.failures = 0

    def next_delay(
        self,
        cause: Cause,
        rand: float,
        retry_after_seconds: float | None = None,
        *,
        leading: bool = False,
    ) -> float:
        """Seconds to wait after a ``cause``; a FAILURE or BUSY counts one failure more."""
        seconds = delay(
            cause,
            attempt=self.failures,
            rand=rand,
            settings=self.settings,
            retry_after_seconds=retry_after_seconds,
            leading=leading,
        )
        if cause is not Cause.GONE:
            self.failures += 1
        return seconds


HOLD_RESET_AFTER = 60.0
"""Seconds without a failed client watch after which ``FailedWatches`` starts over."""


class FailedWatches:
    """How long the hub holds a client's watch from its cache when the apiserver failed it.

    A client watch the hub could not open upstream (every apiserver failed it: a connect that
    timed out, a reset, a body-less end) is answered from the cache (``localwatches``: held
    open, with bookmarks). The cloud still counts as healthy, so without this the held watch
    would end within the heal spread and the client would watch again at once: one more
    connection, one more TLS handshake for an apiserver that is already not keeping up. After
    a kube-apiserver restart in a fleet of 30 nodes that loop was a storm of its own (11,000
    connects abandoned in two minutes, a few seconds apart for every watch of every kubelet),
    and the restarted apiserver did not get ready within two minutes. client-go's reflector
    backs off after a failed watch; a held watch is no failure to it, so the hub backs off for
    it: the hold lasts at least ``delay(Cause.FAILURE)`` for the hub's failures in a row
    (0.5 s after the first, doubling to ``max_backoff``, stretched by up to a half), and a
    quiet ``reset_after`` seconds without one starts over. One hub, one count: a hub's
    watches fail together when its apiserver is in trouble, and that is when they should
    wait. PURE: the time and the randomness come in."""

    def __init__(self, settings: Settings, reset_after: float = HOLD_RESET_AFTER) -> None:
        self._pacer = Pacer(settings)
        self._reset_after = reset_after
        self._last: float | None = None

    def failed(self, now: float, rand: float) -> float:
        """A client watch failed upstream at ``now``: the seconds its hold lasts at least."""
        if self._last is not None and now - self._last >= self._reset_after:
            self._pacer.succeeded()
        self._last = now
        return self._pacer.next_delay(Cause.FAILURE, rand)
