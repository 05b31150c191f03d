"""What a follower does when an answer of its leader failed: try the leader again, or read
from elsewhere (the other leaders, else the cloud) for a while.

PURE: the count of consecutive failures of that leader and the kind of failure in, a decision
out (the feeder adds jitter and carries it out).

- A *soft* failure says the leader is there but cannot answer this request yet: it is still
  starting (429 not synced, 503 not ready), or it is behind this hub ("Too large resource
  version": this hub read the cloud more recently; the next attempt resumes from this hub's
  version instead of asking for a state the leader does not have yet). The leader is tried
  again after ``first``, doubling, ``tolerated`` times; only then does the feeder of that
  resource leave it (the hub's other feeders stay), for a time that keeps doubling up to
  ``penalty``. A cloud that every follower bounces to is what pool scope exists to avoid.
- A *hard* failure (refused, silent past the idle timeout, an error status, garbage) leaves
  the leader for ``penalty`` at once, for every feeder of the hub: it is misbehaving, and the
  TCP check decides when it is back.

The count is reset by the first good answer of that leader (an event, a BOOKMARK, a list).
"""

from __future__ import annotations

import dataclasses

FIRST = 0.5
TOLERATED = 3


@dataclasses.dataclass(frozen=True, slots=True)
class Retry:
    delay: float
    """Seconds before the same choice is made again (the leader, while usable)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Leave:
    seconds: float
    """Seconds the leader is not used (``leaders.Leaders.penalize``)."""


def after_failure(
    strikes: int,
    *,
    soft: bool,
    penalty: float,
    first: float = FIRST,
    tolerated: int = TOLERATED,
) -> Retry | Leave:
    """``strikes``: consecutive failures of the leader, this one included (1 or more)."""
    if not soft:
        return Leave(penalty)
    wait = first * 2 ** min(max(strikes, 1) - 1, 32)
    if strikes <= tolerated:
        return Retry(wait)
    return Leave(min(penalty, wait))
