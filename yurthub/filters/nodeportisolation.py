"""``nodeportisolation``: a NodePort opens only in the pools its Service names.

PURE. For a ``NodePort`` or ``LoadBalancer`` Service annotated ``nodeport.openyurt.io/listen``
(reference §6), with this node's pool (``--nodepool-name``, else the node's
``apps.openyurt.io/nodepool`` label):

- the node is in no pool: kept (a plain Kubernetes node);
- the annotation is a comma list of pool names; the Service is kept when it names this pool,
  dropped when it names ``-<pool>``, kept for ``*``, and dropped otherwise (an empty value too).
  A name given more than once (``-foo,foo``) counts as its first mention, sign included (so
  ``-*`` before ``*`` leaves no wildcard); this pool's mention wins over ``*`` (YurtHub's
  precedence).

Everything else is kept.
"""

from __future__ import annotations

from yurthub.filters import inputs, objects

LISTEN_ANNOTATION = "nodeport.openyurt.io/listen"
PORT_TYPES = frozenset({"NodePort", "LoadBalancer"})


def mentions(value: str) -> dict[str, bool]:
    """Name -> listens, from each name's first mention (``-`` before it: excluded)."""
    first: dict[str, bool] = {}
    for part in value.split(","):
        part = part.strip()
        excluded = part.startswith("-")
        name = part[1:] if excluded else part
        if name and name not in first:
            first[name] = not excluded
    return first


def listens_in(value: str, pool: str) -> bool:
    first = mentions(value)
    if pool in first:
        return first[pool]
    return first.get("*", False)


def apply(obj: objects.Obj, kind: str, world: inputs.Inputs) -> objects.Obj | None:
    if kind != "Service" or objects.spec(obj).get("type") not in PORT_TYPES:
        return obj
    value = objects.annotation(obj, LISTEN_ANNOTATION)
    if value is None:
        return obj
    pool = world.pool_name()
    if not pool:
        return obj
    return obj if listens_in(value, pool) else None
