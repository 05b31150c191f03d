"""The pure decisions of taking over from YurtHub (``yurthub.migrationplans``)."""

from __future__ import annotations

import pytest

from yurthub import migrationplans, settings
from yurthub.migrationplans import Step

AUTO, OFF = settings.MigrationMode.AUTO, settings.MigrationMode.OFF
ALL = frozenset(migrationplans.CERTIFICATE_FILES)


@pytest.mark.parametrize(
    ("mode", "has_database", "imported_before", "why_not"),
    [
        (AUTO, False, False, None),  # the first start: look
        (AUTO, True, False, "this hub already has a cache"),
        (AUTO, False, True, "imported before"),  # the database moved aside: no second import
        (AUTO, True, True, "imported before"),
        (OFF, False, False, "--migrate-from-yurthub=off"),
    ],
)
def test_cache_import(
    mode: settings.MigrationMode, has_database: bool, imported_before: bool, why_not: str | None
) -> None:
    assert migrationplans.cache_import(mode, has_database, imported_before) == why_not


@pytest.mark.parametrize(
    ("mode", "same_root", "has_identity", "present", "copies"),
    [
        (AUTO, False, False, ALL, migrationplans.CERTIFICATE_FILES),
        (AUTO, False, False, frozenset({"pki/yurthub-current.pem", "pki/ca.crt"}),
         ("pki/ca.crt", "pki/yurthub-current.pem")),
        (AUTO, False, False, frozenset({"pki/ca.crt", "bootstrap-hub.conf"}), ()),  # no identity
        (AUTO, False, True, ALL, ()),  # this hub has its own
        (AUTO, True, False, ALL, ()),  # the same directory: already this hub's
        (OFF, False, False, ALL, ()),
        (AUTO, False, False, frozenset(), ()),
    ],
)  # fmt: skip
def test_certificate_copies(
    mode: settings.MigrationMode,
    same_root: bool,
    has_identity: bool,
    present: frozenset[str],
    copies: tuple[str, ...],
) -> None:
    assert migrationplans.certificate_copies(mode, same_root, has_identity, present) == copies


@pytest.mark.parametrize(
    ("listen", "secure", "addresses"),
    [
        (settings.ListenSettings(), True,
         (("127.0.0.1", 10261), ("127.0.0.1", 10267), ("127.0.0.1", 10268))),
        (settings.ListenSettings(), False,  # --kubeconfig: no serving certificate, no 10268
         (("127.0.0.1", 10261), ("127.0.0.1", 10267))),
        (settings.ListenSettings(enable_dummy_if=True), True,
         (("127.0.0.1", 10261), ("127.0.0.1", 10267), ("169.254.2.1", 10268))),
        (settings.ListenSettings(proxy_port=0, serve_port=0, proxy_secure_port=0), True, ()),
        (settings.ListenSettings(bind_proxy_address="::1", proxy_port=10261, serve_port=0,
                                 proxy_secure_port=10261), True, (("::1", 10261),)),  # once
    ],
)  # fmt: skip
def test_listen_addresses(
    listen: settings.ListenSettings, secure: bool, addresses: tuple[tuple[str, int], ...]
) -> None:
    assert migrationplans.listen_addresses(listen, secure) == addresses


@pytest.mark.parametrize(
    ("busy", "elapsed", "step", "message"),
    [
        ((), 0.0, Step.BIND, ""),
        ((), 99.0, Step.BIND, ""),  # free, even after the deadline
        ((("127.0.0.1", 10261),), 0.0, Step.WAIT,
         "waiting for YurtHub to stop: 127.0.0.1:10261 is in use"),
        ((("127.0.0.1", 10261), ("::1", 10267)), 5.0, Step.WAIT,
         "waiting for YurtHub to stop: 127.0.0.1:10261, [::1]:10267 are in use"),
        ((("127.0.0.1", 10267),), 10.0, Step.GIVE_UP,
         "127.0.0.1:10267 is still in use after 10s (is YurtHub stopped?)"),
    ],
)  # fmt: skip
def test_port_wait(
    busy: tuple[tuple[str, int], ...], elapsed: float, step: Step, message: str
) -> None:
    assert migrationplans.port_wait(busy, 100.0, 100.0 + elapsed, 10.0) == (
        migrationplans.PortWait(step, message)
    )
