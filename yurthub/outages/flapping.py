"""Whether the link dropping again goes on with the last outage or begins a new one, and when
an ended outage is over for good.

PURE: records and instants in, a decision out (``recording`` asks, with its clock's reading).

A link that comes back and drops again within ``window`` seconds (``--outage-flap-window-
seconds``, ``records.FLAP_WINDOW``: 30 s) of an outage's end is one outage that flapped, not
two: a fleet whose links heal at once in front of an overloaded apiserver saw its hubs declare
the cloud gone again hundreds of times in a minute, each a record and an Event of its own. So:

- an ended outage stays **open** for ``window`` seconds after its end (measured on the
  monotonic clock of the boot it ended in), as long as its Event is not posted: the link
  dropping again meanwhile reopens it (``on_drop``: ``Drop.REOPEN``);
- once the link has stayed up that long the outage is **final** (``left`` is 0): its Event may
  be posted, and a later drop begins a new outage;
- an outage whose Event is in the cloud (or was refused) is final whatever the time: the cloud
  has its words, a new drop is a new outage;
- what cannot be measured is final: an outage that ended in another boot (its monotonic
  reading means nothing now), or a record from an older hub that kept no end reading;
- ``window`` 0: no folding, each drop a new outage (the behaviour before).
"""

from __future__ import annotations

import enum
import math

from yurthub.outages import records


class Drop(enum.Enum):
    """What a drop of the link does (``on_drop``)."""

    BEGIN = "begin"
    """A new outage."""
    REOPEN = "reopen"
    """The last outage goes on (``records.Outage.reopen``)."""


def left(outage: records.Outage, now: records.Instant, window: float) -> float:
    """Seconds the link must still stay up before the ended ``outage`` is final (0: final now);
    one still going on is not final (infinite)."""
    if outage.ended is None:
        return math.inf
    if window <= 0 or outage.event or outage.until is None:
        return 0.0
    if now.boot != outage.boot or not outage.boot or now.mono < outage.until:
        return 0.0  # another boot (or a reading gone back): the gap cannot be measured
    return max(0.0, outage.until + window - now.mono)


def on_drop(last: records.Outage | None, now: records.Instant, window: float) -> Drop:
    """The link dropped at ``now``; ``last``: the last outage that ended (None: none)."""
    if last is None or last.ended is None:
        return Drop.BEGIN
    return Drop.REOPEN if left(last, now, window) > 0 else Drop.BEGIN
