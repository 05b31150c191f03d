"""What a hub taking over from YurtHub does at start (``yurthub.migrating`` carries it out).

PURE: decisions over what was found on disk and which ports were busy; the clock is passed in.

- **the cache**: imported once, on the first start (no database of this hub's yet, no marker
  of an earlier import) when YurtHub's cache directory holds objects;
- **the certificates**: copied (never moved) from YurtHub's ``--root-dir`` when this hub's
  ``--root-dir`` is another directory and holds no client certificate yet;
- **the ports**: each listen address must be free before the hub binds; while YurtHub (or a
  previous hub) still holds one, wait, up to a deadline.
"""

from __future__ import annotations

import dataclasses
import enum

from yurthub import settings

MARKER = ".imported-from-yurthub"
"""The file, in this hub's cache directory, saying YurtHub's cache was imported (and from what:
the source directory and a digest of what was read)."""

CERTIFICATE_FILES = (
    "pki/ca.crt",
    "pki/yurthub-current.pem",
    "pki/yurthub-server-current.pem",
    "bootstrap-hub.conf",
)
"""What YurtHub keeps under its ``--root-dir`` that this hub can use as it is
(``yurthub.certs.layout``). ``yurthub.conf`` is not among them: it names YurtHub's own paths."""

CLIENT_PAIR = "pki/yurthub-current.pem"


def cache_import(
    mode: settings.MigrationMode, has_database: bool, imported_before: bool
) -> str | None:
    """Why YurtHub's cache is not to be looked at, or None: look (and import what is there)."""
    if mode is settings.MigrationMode.OFF:
        return "--migrate-from-yurthub=off"
    if imported_before:
        return "imported before"
    if has_database:
        return "this hub already has a cache"
    return None


def certificate_copies(
    mode: settings.MigrationMode,
    same_root: bool,
    has_identity: bool,
    present: frozenset[str],
) -> tuple[str, ...]:
    """Which of ``CERTIFICATE_FILES`` (relative to both root directories) to copy from YurtHub's.

    Nothing when off, when both hubs share the directory (the files are already this hub's), when
    this hub has its client certificate, or when YurtHub has none (a CA alone is no identity)."""
    if mode is settings.MigrationMode.OFF or same_root or has_identity:
        return ()
    if CLIENT_PAIR not in present:
        return ()
    return tuple(name for name in CERTIFICATE_FILES if name in present)


def listen_addresses(listen: settings.ListenSettings, secure: bool) -> tuple[tuple[str, int], ...]:
    """The (host, port) pairs the hub binds at start that must be free; port 0 picks a free one
    and needs no wait. ``secure``: the hub serves the secure port (it has its own certificates;
    a ``--kubeconfig`` hub has none), on the dummy IP or the proxy address."""
    secure_host = listen.dummy_if_ip if listen.enable_dummy_if else listen.bind_proxy_address
    wanted = (
        (listen.bind_proxy_address, listen.proxy_port),
        (listen.bind_address, listen.serve_port),
        *(((secure_host, listen.proxy_secure_port),) if secure else ()),
    )
    return tuple(dict.fromkeys(a for a in wanted if a[1] != 0))


class Step(enum.Enum):
    BIND = "bind"
    WAIT = "wait"
    GIVE_UP = "give up"


@dataclasses.dataclass(frozen=True, slots=True)
class PortWait:
    step: Step
    message: str = ""
    """For WAIT, the line to log (when it changed); for GIVE_UP, the start-up failure."""


def port_wait(
    busy: tuple[tuple[str, int], ...], started: float, now: float, timeout: float
) -> PortWait:
    """What to do given the listen addresses in use now (``started``/``now``: a monotonic clock)."""
    if not busy:
        return PortWait(Step.BIND)
    shown = ", ".join(_address(a) for a in busy)
    verb = "is" if len(busy) == 1 else "are"
    if now - started >= timeout:
        return PortWait(
            Step.GIVE_UP, f"{shown} {verb} still in use after {timeout:g}s (is YurtHub stopped?)"
        )
    return PortWait(Step.WAIT, f"waiting for YurtHub to stop: {shown} {verb} in use")


def _address(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
