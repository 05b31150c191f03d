"""The per-request token check: ``TokenVerifier.verify(token)`` -> the ServiceAccount or why not.

CPU only (no I/O, no awaiting): called on the event loop for every Bearer request. A signature
check costs tens of microseconds, so results are memoised in a bounded LRU keyed by a digest
of the token (the token itself is never kept or logged), tagged with the issuer key set's
version: a new key set re-checks everything, an expiry is re-checked at every hit.

Accepted: the issuer's tokens (``jwts``, keys from ``issuers.IssuerKeys``) and this hub's own
offline tokens (``offlinetokens``; minted only to the node for its own pods,
``tokengranting``). API audiences: ``--api-audiences`` when given, else the
issuer (the apiserver's own default when its ``--api-audiences`` is unset).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Sequence

from yurthub.authn import issuers, jwts, offlinetokens

log = logging.getLogger(__name__)

MEMO_SIZE = 4096
NEGATIVE_TTL = 10.0
"""Seconds a refusal is remembered (a token refused for clock skew may become valid)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    account: jwts.ServiceAccount | None
    reason: str = ""
    """Why not (``account`` is None)."""


class TokenVerifier:
    def __init__(
        self,
        keys: issuers.IssuerKeys,
        *,
        api_audiences: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
        memo_size: int = MEMO_SIZE,
    ) -> None:
        self.keys = keys
        self._api_audiences = tuple(api_audiences)
        self._clock = clock
        self.offline = offlinetokens.OfflineTokens(self.audiences)
        self._memo: collections.OrderedDict[bytes, tuple[int, float, Verdict]] = (
            collections.OrderedDict()
        )
        self._memo_size = memo_size
        self._told: set[str] = set()

    def audiences(self) -> tuple[str, ...]:
        if self._api_audiences:
            return self._api_audiences
        return (self.keys.issuer,) if self.keys.issuer else ()

    def verify(self, token: str) -> Verdict:
        now = self._clock()
        digest = hashlib.blake2b(token.encode("utf-8", "surrogateescape"), digest_size=20).digest()
        version = self.keys.version
        hit = self._memo.get(digest)
        if hit is not None and hit[0] == version:
            verdict = hit[2]
            if verdict.account is not None:
                self._memo.move_to_end(digest)
                if now >= verdict.account.expires:
                    return Verdict(None, "the token has expired")
                return verdict
            if now - hit[1] < NEGATIVE_TTL:
                return verdict
        verdict = self._check(token, now)
        self._memo[digest] = (version, now, verdict)
        self._memo.move_to_end(digest)
        while len(self._memo) > self._memo_size:
            self._memo.popitem(last=False)
        if verdict.account is None and verdict.reason not in self._told and len(self._told) < 64:
            self._told.add(verdict.reason)
            log.info(
                "a Bearer token is not verifiable by the hub (%s): its answers are not cached, "
                "and offline it gets 401",
                verdict.reason,
            )
        return verdict

    def _check(self, token: str, now: float) -> Verdict:
        try:
            parsed = jwts.parse(token)
            if parsed.claims.get("iss") == offlinetokens.ISSUER:
                return Verdict(self.offline.verify(parsed, now))
            keyset = self.keys.current
            if keyset is None:
                return Verdict(None, "the ServiceAccount issuer's keys are not known yet")
            try:
                jwts.verify_signature(parsed, keyset.keys)
            except jwts.UnknownKey:
                self.keys.refresh_soon()
                raise
            return Verdict(
                jwts.check_claims(
                    parsed.claims, issuers=(keyset.issuer,), audiences=self.audiences(), now=now
                )
            )
        except jwts.TokenError as e:
            return Verdict(None, str(e))
