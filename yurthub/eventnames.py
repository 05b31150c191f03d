"""Names of the Events the hub makes itself: valid for any valid node name.

PURE. An Event's name must be a DNS subdomain (lowercase letters, digits, ``-`` and ``.``,
beginning and ending with a letter or digit, at most 253 characters), as a node's name is. The
hub names its Node Events ``<node>.<what>`` (``EdgeOutageEnded``: ``<node>.edge-outage-<id>``;
``OfflineEventsDropped``: ``<node>.offline-events-dropped.<n>``), which for a node name near the
limit is too long. Then the node's name is cut and a short hash of the whole name stands
between: ``<node cut>.<hash>.<what>``, exactly 253 characters or fewer. So the name is

- deterministic (the same node and ``what`` give the same name: a retried post is a 409);
- distinct for distinct nodes (two long names sharing their first 200 characters differ by the
  hash: 10 hex digits of SHA-256, 40 bits);
- valid: the cut never leaves a ``.`` or ``-`` before the separator.

A name that fits is left as it was (kubelet's and YurtHub's readers see what they always did).
"""

from __future__ import annotations

import hashlib

MAX_NAME = 253
"""A DNS subdomain's length at most (an object's ``metadata.name``)."""
HASH_CHARS = 10


def on_node(node: str, what: str) -> str:
    """``<node>.<what>``, or ``<node cut>.<hash>.<what>`` when that is longer than
    ``MAX_NAME``. ``what`` is the hub's own (lowercase letters, digits, ``-``, ``.``), short."""
    name = f"{node}.{what}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:HASH_CHARS]
    room = MAX_NAME - len(what) - len(digest) - 2
    head = node[: max(0, room)].rstrip(".-")
    tail = f"{digest}.{what}"
    return f"{head}.{tail}" if head else tail[:MAX_NAME]
