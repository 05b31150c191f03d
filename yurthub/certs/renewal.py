"""When a certificate is renewed, and how long to wait after a failure.

PURE: times in, times out; randomness is passed in as a number in [0, 1).

- Renewal at a jittered 70-90 % of the certificate's validity, as client-go's certificate
  manager does: hubs that got their certificates at the same moment do not all come back to the
  signer at the same moment. The caller passes the window from when it got the certificate
  (``pemfiles.Pair.renewal_window``), not from a backdated ``notBefore``. ``renew_before`` (a
  test knob, 0 off) pulls the deadline to at most that many seconds before ``notAfter``: the
  real apiserver does not sign for less than 10 minutes, and a rotation test should not wait 7
  of them.
- A certificate whose ``notBefore`` is in the future is usable by us towards the apiserver
  (the apiserver checks it against its own clock) but a client of ours on this node would
  refuse it: ``standing`` says so, so the log line can name clock skew.
- Back-off after a failure: doubling from ``base`` to ``cap``, with ±20 % jitter.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum

FRACTION_LOW = 0.7
FRACTION_HIGH = 0.9


class Standing(enum.Enum):
    VALID = "valid"
    RENEW = "renew"
    """Past its renewal deadline, still valid."""
    EXPIRED = "expired"
    NOT_YET_VALID = "not-yet-valid"
    """``notBefore`` is ahead of the local clock (skew): valid for the apiserver, maybe not
    for local clients."""


@dataclasses.dataclass(frozen=True, slots=True)
class Validity:
    not_before: datetime.datetime
    not_after: datetime.datetime

    @property
    def lifetime(self) -> datetime.timedelta:
        return self.not_after - self.not_before


def deadline(
    validity: Validity,
    draw: float,
    *,
    low: float = FRACTION_LOW,
    high: float = FRACTION_HIGH,
    renew_before: float = 0.0,
) -> datetime.datetime:
    """When to renew: ``notBefore`` + (``low`` + ``draw`` * (``high`` - ``low``)) * lifetime,
    or earlier when ``renew_before`` seconds before expiry comes first."""
    if not 0.0 <= draw < 1.0:
        raise ValueError(f"draw {draw} is not in [0, 1)")
    if not 0.0 < low <= high < 1.0:
        raise ValueError(f"renewal fractions {low}..{high} must satisfy 0 < low <= high < 1")
    fraction = low + draw * (high - low)
    when = validity.not_before + validity.lifetime * fraction
    if renew_before > 0:
        when = min(when, validity.not_after - datetime.timedelta(seconds=renew_before))
    return when


def standing(validity: Validity, renew_at: datetime.datetime, now: datetime.datetime) -> Standing:
    if now >= validity.not_after:
        return Standing.EXPIRED
    if now < validity.not_before:
        return Standing.NOT_YET_VALID
    if now >= renew_at:
        return Standing.RENEW
    return Standing.VALID


def backoff(attempt: int, draw: float, *, base: float, cap: float) -> float:
    """Seconds before retry number ``attempt`` (1 = the first retry)."""
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    # min() before the power: a long outage must not overflow the float.
    raw = min(cap, base * 2.0 ** min(attempt - 1, 62))
    return max(0.0, min(cap, raw * (0.8 + 0.4 * draw)))
