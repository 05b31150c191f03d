"""Where the hub keeps its identity under ``--root-dir`` (YurtHub's layout, reference §7).

PURE: paths and names only, nothing is read or written here.

    <root>/yurthub.conf                    kubeconfig: the cluster + the client pair below
    <root>/bootstrap-hub.conf              kubeconfig: the cluster + the join token (token mode)
    <root>/pki/ca.crt                      the cluster CA (trust for upstream and for clients)
    <root>/pki/yurthub-current.pem         -> yurthub-<timestamp>.pem (client cert + key)
    <root>/pki/yurthub-server-current.pem  -> yurthub-server-<timestamp>.pem (serving)

The ``-current.pem`` names are symlinks to timestamped files holding certificate and key in
one PEM, exactly as client-go's certificate FileStore writes them, so the files of an OpenYurt
node are picked up as they are and a rotation is one atomic ``rename`` of a symlink. The
timestamp is client-go's ``2006-01-02-15-04-05`` layout in UTC; two rotations within one
second get a ``.1``, ``.2`` ... suffix instead of overwriting each other.
"""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
import re

CLIENT_PREFIX = "yurthub"
SERVING_PREFIX = "yurthub-server"
PEM = ".pem"
CURRENT = "current"
UPDATED = "updated"
KEEP_PREVIOUS = 2
"""Timestamped files kept besides the current one: enough to look back at the last rotations,
few enough that keys do not pile up on disk."""

_STAMP = "%Y-%m-%d-%H-%M-%S"
_STAMPED = re.compile(
    r"^(?P<prefix>.+)-(?P<stamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:\.(?P<n>\d+))?\.pem$"
)


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    root: pathlib.Path

    @property
    def hub_kubeconfig(self) -> pathlib.Path:
        return self.root / "yurthub.conf"

    @property
    def bootstrap_kubeconfig(self) -> pathlib.Path:
        return self.root / "bootstrap-hub.conf"

    @property
    def pki(self) -> pathlib.Path:
        return self.root / "pki"

    @property
    def ca_cert(self) -> pathlib.Path:
        return self.pki / "ca.crt"

    def current(self, prefix: str) -> pathlib.Path:
        """The symlink naming the pair in use, e.g. ``pki/yurthub-current.pem``."""
        return self.pki / current_name(prefix)

    @property
    def client_pair(self) -> pathlib.Path:
        return self.current(CLIENT_PREFIX)

    @property
    def serving_pair(self) -> pathlib.Path:
        return self.current(SERVING_PREFIX)

    @property
    def issuer_keys(self) -> pathlib.Path:
        """The ServiceAccount issuer's public keys, kept for verifying tokens offline."""
        return self.root / "service-account-issuer.json"


def current_name(prefix: str) -> str:
    return f"{prefix}-{CURRENT}{PEM}"


def updated_name(prefix: str) -> str:
    """The symlink made first and renamed over ``current``: the swap is one ``rename``."""
    return f"{prefix}-{UPDATED}{PEM}"


def stamped_name(prefix: str, when: datetime.datetime, taken: frozenset[str] = frozenset()) -> str:
    """A new timestamped file name for ``prefix`` at ``when`` (UTC), not among ``taken``."""
    stamp = when.astimezone(datetime.UTC).strftime(_STAMP)
    name = f"{prefix}-{stamp}{PEM}"
    n = 0
    while name in taken:
        n += 1
        name = f"{prefix}-{stamp}.{n}{PEM}"
    return name


def stamped_of(prefix: str, names: list[str]) -> list[str]:
    """The timestamped files of ``prefix`` among ``names``, oldest first.

    ``yurthub-server-...`` files are not ``yurthub`` files although they share the start: the
    part before the timestamp must be exactly ``prefix``.
    """
    found: list[tuple[str, int, str]] = []
    for name in names:
        m = _STAMPED.match(name)
        if m and m.group("prefix") == prefix:
            found.append((m.group("stamp"), int(m.group("n") or 0), name))
    return [name for _, _, name in sorted(found)]


def stale(prefix: str, names: list[str], in_use: str, keep: int = KEEP_PREVIOUS) -> list[str]:
    """Timestamped files of ``prefix`` to delete: all but ``in_use`` and the ``keep`` newest
    others. Never ``in_use``, whatever its age (a clock set back makes it look old)."""
    others = [n for n in stamped_of(prefix, names) if n != in_use]
    return others[: max(0, len(others) - keep)]
