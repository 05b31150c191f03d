"""``limit``/``continue`` tokens: where the next page starts, and as of which resourceVersion.

A token is opaque to clients (base64 of a small JSON document, like the real
apiserver's). It carries the list's resourceVersion, so every page of one list
shows the cluster as of the first page (storage rebuilds that snapshot from its
event history), and the last key returned: the next page starts strictly after
it. Pure: no state, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses

import orjson

from yurthub.testing.sim import errors

Key = tuple[str, str]
_VERSION = "meta.k8s.io/v1"


@dataclasses.dataclass(frozen=True, slots=True)
class Continue:
    rv: int
    after: Key


def encode(rv: int, after: Key) -> str:
    doc = {"v": _VERSION, "rv": rv, "start": list(after)}
    return base64.urlsafe_b64encode(orjson.dumps(doc)).decode().rstrip("=")


def decode(token: str) -> Continue:
    """Parse a token; a malformed one is a 400, as upstream."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        doc = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError) as e:
        raise errors.bad_request(f"continue key is not valid: {e}") from e
    if not isinstance(doc, dict) or doc.get("v") != _VERSION:
        raise errors.bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion"
        )
    rv, start = doc.get("rv"), doc.get("start")
    if (
        not isinstance(rv, int)
        or rv <= 0
        or not isinstance(start, list)
        or len(start) != 2
        or not all(isinstance(s, str) for s in start)
    ):
        raise errors.bad_request("continue key is not valid: malformed start key")
    return Continue(rv=rv, after=(start[0], start[1]))
