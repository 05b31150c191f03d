"""Taking over a node from YurtHub at start (``--migrate-from-yurthub=auto``), before binding.

``prepare`` carries out ``migrationplans``: on the first start it imports YurtHub's cache files
(``cache.yurthubfiles``) into this hub's cache and writes ``migrationplans.MARKER`` beside its
database, so a later start never imports again; it copies YurtHub's certificates when this hub
has none under its own ``--root-dir``; then it waits for the listen ports to be free. YurtHub's
files are only ever read: rolling back to YurtHub finds them byte for byte as they were.

The copies are this hub's: the cache is imported sealed, and the copied private keys are
written sealed under the node's data key (``certs.sealedkeys``), so no plaintext copy of a key
is made under this hub's ``--root-dir``. When both hubs share the root directory (the default),
there is nothing to copy: the certificate manager seals the keys in place at start, and rolling
back to YurtHub takes ``edgehub cache unseal-identity`` first (docs/migrating.md).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import pathlib
import socket
import time
from collections.abc import Callable

import orjson
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from yurthub import atomicfiles, migrationplans, privatekeys, settings
from yurthub.cache import keysealing, store, yurthubfiles
from yurthub.certs import layout, sealedkeys

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2


class PortsBusy(OSError):
    """A listen port still in use at the deadline: the hub does not start (exit 3)."""


async def prepare(
    hub: settings.HubSettings,
    *,
    clock: Callable[[], float] = time.monotonic,
    poll: float = POLL_SECONDS,
    keys: store.Keys | None = None,
    seal: sealedkeys.Seal = sealedkeys.PLAIN,
) -> None:
    """``keys``: the node's data keys, opened already (else the import opens them from the key
    source); ``seal``: how the copied private keys are written."""
    migration = hub.migration
    if migration.mode is not settings.MigrationMode.OFF:
        loop = asyncio.get_running_loop()
        try:
            await import_cache(
                hub.cache.disk_cache_path, migration, hub.cache.key_source, keys=keys
            )
        except (store.StoreError, OSError) as e:
            # The hub still starts: its components list afresh once the cloud is there.
            log.warning("cannot import YurtHub's cache into %s: %s", hub.cache.disk_cache_path, e)
        copied: list[str] = []
        try:
            if hub.certs.source.manages_certificates:  # else the identity is not in --root-dir
                copied = await loop.run_in_executor(
                    None, adopt_certificates, hub.certs.root_dir, migration, seal
                )
        except OSError as e:
            log.warning("cannot copy YurtHub's certificates to %s: %s", hub.certs.root_dir, e)
        if copied:
            log.info(
                "adopted YurtHub's certificates: copied %s from %s to %s",
                ", ".join(copied),
                migration.yurthub_root_dir,
                hub.certs.root_dir,
            )
        await wait_for_ports(
            migrationplans.listen_addresses(hub.listen, hub.certs.source.manages_certificates),
            migration.port_wait_timeout,
            clock=clock,
            poll=poll,
        )


async def import_cache(
    path: pathlib.Path,
    migration: settings.MigrationSettings,
    key_source: keysealing.Source | None = None,
    *,
    keys: store.Keys | None = None,
) -> int:
    """Import YurtHub's cache into the hub's at ``path`` if this is the first start; the number
    of objects imported. Raises ``store.StoreError`` when the cache cannot be written."""
    marker = path / migrationplans.MARKER
    has_database = any((path / name).exists() for name in store.DB_FILES)
    why_not = migrationplans.cache_import(migration.mode, has_database, marker.exists())
    source = migration.yurthub_cache_dir
    if why_not is not None:
        log.debug("not importing YurtHub's cache: %s", why_not)
        return 0
    if not source.is_dir():
        log.debug("not importing YurtHub's cache: no %s", source)
        return 0
    loop = asyncio.get_running_loop()
    tree = await loop.run_in_executor(
        None, lambda: yurthubfiles.read(source, skip=yurthubfiles.OWN_FILES)
    )
    objects = yurthubfiles.count(tree)
    if not objects:
        log.debug("not importing YurtHub's cache: no objects under %s", source)
        return 0
    await yurthubfiles.fill(path, tree, key_source, data_keys=keys)
    record = {"from": str(source), "sha256": yurthubfiles.digest(tree), "objects": objects}
    await loop.run_in_executor(None, atomicfiles.write, marker, orjson.dumps(record) + b"\n")
    components = sorted({scope.component for scope in tree.objects})
    log.info(
        "imported YurtHub's cache: %d objects and %d lists of %s from %s into %s "
        "(skipped %d files; YurtHub's files left as they were)",
        objects,
        len(tree.objects),
        ", ".join(components),
        source,
        path,
        len(tree.skipped),
    )
    return objects


def adopt_certificates(
    root: pathlib.Path,
    migration: settings.MigrationSettings,
    seal: sealedkeys.Seal = sealedkeys.PLAIN,
) -> list[str]:
    """Copy YurtHub's certificate files into ``root`` when this hub has no client certificate
    there; the relative names copied. A ``-current.pem`` symlink is copied as the file it names
    plus the same symlink, as ``certs.layout`` keeps them; the key in it is written sealed as
    ``seal`` says (a pair whose key cannot be sealed is not copied: one warning, and the hub
    requests its own)."""
    source = migration.yurthub_root_dir
    own = layout.Layout(root)
    same = _same_directory(root, source)
    present = frozenset(
        name for name in migrationplans.CERTIFICATE_FILES if (source / name).is_file()
    )
    copies = migrationplans.certificate_copies(
        migration.mode,
        same,
        own.client_pair.exists() or own.client_pair.is_symlink(),
        present,
    )
    copied: list[str] = []
    for name in copies:
        src, dst = source / name, root / name
        if dst.exists() or dst.is_symlink():
            continue  # never overwrite what this hub already has
        dst.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if src.is_symlink():
            target = src.resolve()
            stamped = dst.parent / target.name
            if not stamped.exists():
                data = _sealed_copy(target, target.read_bytes(), seal)
                if data is None:
                    continue
                atomicfiles.write(stamped, data)
            os.symlink(target.name, dst)
        else:
            data = _sealed_copy(src, src.read_bytes(), seal)
            if data is None:
                continue
            atomicfiles.write(dst, data)
        copied.append(name)
    return copied


def _sealed_copy(source: pathlib.Path, data: bytes, seal: sealedkeys.Seal) -> bytes | None:
    """``data`` as it is to be written in this hub's root: a file holding a plaintext private
    key with the key sealed; None (one warning) when it cannot be."""
    block = privatekeys.key_block(data)
    if block is None or privatekeys.is_encrypted(block) or not (seal.sealing or seal.unavailable):
        return data
    try:
        key, _ = privatekeys.open_key(block)
        chain = b"".join(
            c.public_bytes(serialization.Encoding.PEM)
            for c in x509.load_pem_x509_certificates(data)
        )
        return sealedkeys.pair_pem(chain, key, seal)
    except (ValueError, sealedkeys.Unavailable) as e:
        log.warning("not copying %s: its private key cannot be sealed: %s", source, e)
        return None


async def wait_for_ports(
    addresses: tuple[tuple[str, int], ...],
    deadline_seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    poll: float = POLL_SECONDS,
) -> None:
    """Return once every address can be bound; log one line when the busy ones change; raise
    ``PortsBusy`` at the deadline."""
    started = clock()
    said = ""
    while True:
        busy = tuple(a for a in addresses if _in_use(a))
        plan = migrationplans.port_wait(busy, started, clock(), deadline_seconds)
        if plan.step is migrationplans.Step.BIND:
            if said:
                log.info("the listen ports are free: starting")
            return
        if plan.step is migrationplans.Step.GIVE_UP:
            raise PortsBusy(plan.message)
        if plan.message != said:
            log.warning("%s", plan.message)
            said = plan.message
        await asyncio.sleep(poll)


def _in_use(address: tuple[str, int]) -> bool:
    """Whether binding ``address`` now fails because another socket holds it. An address this
    host does not have (the dummy IP before its interface exists) is not "in use"."""
    host, port = address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listeners bind
        try:
            probe.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def _same_directory(a: pathlib.Path, b: pathlib.Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b
