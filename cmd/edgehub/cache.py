"""``edgehub cache``: look into a hub's disk cache (``ls``, ``get KEY``, ``stats``, ``verify``),
fill it from an OpenYurt node's YurtHub cache (``import-yurthub``), rotate its data key
(``rotate-key``) and write the hub's sealed private keys back as plain PEM for a rollback to
YurtHub (``unseal-identity``).

The looking is read-only and safe beside a running hub (``yurthub.cache.verifying`` opens SQLite
read-only); ``import-yurthub`` writes, through the hub's own store, while the hub is stopped, as
does ``unseal-identity``.
``verify`` exits 1 when it finds a problem, ``cli.EXIT_STARTUP_FAILURE`` when the path holds no
cache; every command prints one clear line on bad input, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import pathlib
import sqlite3
import sys
from collections.abc import Iterator

import click
import orjson

from edgehub import cli, helpgroups
from yurthub.cache import entries, keys, keysealing, sealing, store, verifying, yurthubfiles
from yurthub.certs import layout, pemfiles, sealedkeys
from yurthub.kubeproto import converting

_PATH = click.option(
    "--disk-cache-path",
    default="/etc/kubernetes/cache/",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    help="The hub's cache directory.",
)


_KEY_SOURCE = click.option(
    "--cache-key-source",
    default="auto",
    help="What seals the cache's data key (as the hub's flag): needed to read a sealed cache.",
)
_KEY_FILE = click.option(
    "--cache-key-file", default="", help="The key file that seals the cache's data key."
)


def _sealer(path: pathlib.Path, key_source: str, key_file: str) -> sealing.Sealer:
    """What opens the cache's entries; one line on stderr and exit 3 when nothing can."""
    try:
        source = keysealing.parse_source(key_source, key_file)
        return keysealing.read_sealer(path, source, os.environ)
    except keysealing.KeySourceError as e:
        click.echo(f"edgehub cache: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e


@contextlib.contextmanager
def _opened(path: pathlib.Path) -> Iterator[sqlite3.Connection]:
    """The cache's database, read-only; a damaged one is one line on stderr and exit 1."""
    try:
        con = verifying.connect(path)
    except verifying.NotACache as e:
        click.echo(f"edgehub cache: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    try:
        yield con
    except sqlite3.DatabaseError as e:
        # SQLite finds damage (or a file that is no database) only when it reads the pages.
        click.echo(f"edgehub cache: the database in {path} is damaged: {e}", err=True)
        raise SystemExit(1) from e
    finally:
        con.close()


@click.group(cls=helpgroups.Group, topics="cache", context_settings=cli.COMMAND_CONTEXT)
def command() -> None:
    """Inspect a hub's disk cache (read-only), import YurtHub's, manage its data key."""


@command.command(
    name="ls", cls=helpgroups.Command, topics="cache ls", context_settings=cli.COMMAND_CONTEXT
)
@_PATH
@_KEY_SOURCE
@_KEY_FILE
@click.argument("prefix", default="")
def list_keys(
    disk_cache_path: pathlib.Path, prefix: str, cache_key_source: str, cache_key_file: str
) -> None:
    """List keys (optionally only those starting with PREFIX), with kind, size and version."""
    sealer = _sealer(disk_cache_path, cache_key_source, cache_key_file)
    with _opened(disk_cache_path) as con:
        for row in verifying.rows(con, prefix):
            detail = ""
            if row.value is not None and row.kind == "object":
                try:
                    entry = entries.decode_header(sealer.unseal(row.key, row.value))
                    detail = f"rv={entry.resource_version} owners={len(entry.owners)}"
                except entries.CorruptEntry:
                    detail = "CORRUPT"
            elif row.value is not None and row.kind == "list":
                try:
                    record = entries.decode_list(sealer.unseal(row.key, row.value))
                    detail = f"rv={record.resource_version} members={record.members}"
                except entries.CorruptEntry:
                    detail = "CORRUPT"
            size = len(row.value) if row.value is not None else 0
            click.echo(f"{row.kind:<8} {size:>9} {row.key} {detail}".rstrip())


@command.command(
    name="get", cls=helpgroups.Command, topics="cache get", context_settings=cli.COMMAND_CONTEXT
)
@_PATH
@_KEY_SOURCE
@_KEY_FILE
@click.argument("key")
def get_key(
    disk_cache_path: pathlib.Path, key: str, cache_key_source: str, cache_key_file: str
) -> None:
    """Print the stored JSON of KEY (an object's body, a list record, a document).

    An object stored as protobuf (as kubelet and kube-proxy receive it) is shown as JSON."""
    sealer = _sealer(disk_cache_path, cache_key_source, cache_key_file)
    with _opened(disk_cache_path) as con:
        row = verifying.read(con, key)
    if row is None or row.value is None:
        click.echo(f"edgehub cache: no entry {key!r}", err=True)
        raise SystemExit(1)
    try:
        value = sealer.unseal(key, row.value)
        if row.kind == "object":
            _, body = entries.decode_object(value)
            sys.stdout.buffer.write(verifying.as_json(body) + b"\n")
        elif row.kind == "list":
            record = entries.decode_list(value)
            list_key = keys.parse_list_key(key)
            shown = {
                "resourceVersion": record.resource_version,
                "kind": record.kind,
                "apiVersion": record.api_version,
                "members": record.members,
                "labelSelector": list_key.label_selector,
                "fieldSelector": list_key.field_selector,
            }
            sys.stdout.buffer.write(orjson.dumps(shown, option=orjson.OPT_INDENT_2) + b"\n")
        else:
            _, body = entries.decode_document(value)
            sys.stdout.buffer.write(body + b"\n")
    except (entries.CorruptEntry, keys.BadKey, converting.Undecodable) as e:
        click.echo(f"edgehub cache: {key!r} is corrupt: {e}", err=True)
        raise SystemExit(1) from e


@command.command(
    name="stats", cls=helpgroups.Command, topics="cache stats", context_settings=cli.COMMAND_CONTEXT
)
@_PATH
def show_stats(disk_cache_path: pathlib.Path) -> None:
    """Counts per component and resource, lists, documents, sizes."""
    with _opened(disk_cache_path) as con:
        found = verifying.stats(con)
    files = sum(
        p.stat().st_size for p in disk_cache_path.iterdir() if p.name.startswith("cache.db")
    )
    click.echo(f"objects:   {found.objects}")
    click.echo(f"lists:     {found.lists}")
    click.echo(f"documents: {found.documents}")
    if found.unknown:
        click.echo(f"unknown:   {found.unknown}")
    click.echo(f"bytes:     {found.body_bytes} in entries, {files} on disk")
    for prefix, count in sorted(found.by_scope.items()):
        click.echo(f"  {count:>8}  {prefix}")


@command.command(
    name="verify",
    cls=helpgroups.Command,
    topics="cache verify",
    context_settings=cli.COMMAND_CONTEXT,
)
@_PATH
@_KEY_SOURCE
@_KEY_FILE
def verify(disk_cache_path: pathlib.Path, cache_key_source: str, cache_key_file: str) -> None:
    """Check that every entry decodes (and, sealed, opens) and the list records match."""
    sealer = _sealer(disk_cache_path, cache_key_source, cache_key_file)
    with _opened(disk_cache_path) as con:
        report = verifying.verify(con, sealer)
    for problem in report.problems:
        click.echo(f"PROBLEM {problem}")
    click.echo(
        f"{'ok' if report.ok else 'FAILED'}: {report.objects} objects, {report.lists} lists, "
        f"{report.documents} documents, {len(report.problems)} problems"
    )
    if not report.ok:
        raise SystemExit(1)


@command.command(
    name="rotate-key",
    cls=helpgroups.Command,
    topics="cache rotate-key",
    context_settings=cli.COMMAND_CONTEXT,
)
@_PATH
@_KEY_SOURCE
@_KEY_FILE
def rotate_key(disk_cache_path: pathlib.Path, cache_key_source: str, cache_key_file: str) -> None:
    """Add a new data key to a sealed cache and make it current.

    New writes use it at once after the hub's next start, which re-encrypts every entry of the
    older keys and then forgets them. Safe beside a running hub (it keeps its keys until then)."""
    try:
        source = keysealing.parse_source(cache_key_source, cache_key_file)
        kek = keysealing.resolve(source, os.environ, disk_cache_path, create=False)
        if kek is None:
            raise keysealing.KeySourceError("no --cache-key-source gives a key: nothing to rotate")
        ring = keysealing.load_ring(disk_cache_path, kek)
        if ring is None:
            raise keysealing.KeySourceError(f"{disk_cache_path} holds no sealed cache")
        rotated = keysealing.rotated(ring, os.urandom)
        keysealing.save_ring(disk_cache_path, rotated, kek, os.urandom)
    except (keysealing.KeySourceError, OSError) as e:
        click.echo(f"edgehub cache: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    click.echo(
        f"data key {rotated.current} is current; the hub re-encrypts the entries of "
        f"{', '.join(map(str, sorted(set(ring.keys))))} at its next start"
    )


@command.command(
    name="unseal-identity",
    cls=helpgroups.Command,
    topics="cache unseal-identity",
    context_settings=cli.COMMAND_CONTEXT,
)
@_PATH
@click.option(
    "--root-dir",
    default="/var/lib/yurthub",
    type=click.Path(file_okay=False, exists=True, path_type=pathlib.Path),
    help="The hub's --root-dir (pki/ holds its certificates and keys).",
)
@_KEY_SOURCE
@_KEY_FILE
def unseal_identity(
    disk_cache_path: pathlib.Path,
    root_dir: pathlib.Path,
    cache_key_source: str,
    cache_key_file: str,
) -> None:
    """Write the hub's sealed private keys back as plain PEM (run while the hub is stopped).

    For rolling back to YurtHub, which reads only plain PEM, when both share --root-dir. The
    keys are then readable by anyone who copies the directory; a hub started again seals
    them anew."""
    sealer = _sealer(disk_cache_path, cache_key_source, cache_key_file)
    seal = sealedkeys.from_data_keys(sealer.keys, sealer.current)
    now = datetime.datetime.now(datetime.UTC)
    pki = layout.Layout(root_dir).pki
    failed = False
    for prefix in (layout.CLIENT_PREFIX, layout.SERVING_PREFIX):
        name = layout.current_name(prefix)
        try:
            pair = pemfiles.unseal(pki, prefix, seal, now)
        except FileNotFoundError:
            click.echo(f"{name}: none")
            continue
        except (pemfiles.PairError, OSError) as e:
            click.echo(f"edgehub cache: {e}", err=True)
            failed = True
            continue
        click.echo(f"{name}: {'already plain PEM' if pair is None else 'now plain PEM'}")
    if failed:
        raise SystemExit(1)


@command.command(
    name="import-yurthub",
    cls=helpgroups.Command,
    topics="cache import-yurthub",
    context_settings=cli.COMMAND_CONTEXT,
)
@_PATH
@click.option(
    "--from",
    "source",
    default="/etc/kubernetes/cache/",
    type=click.Path(file_okay=False, exists=True, path_type=pathlib.Path),
    help="YurtHub's cache directory (its --disk-cache-path); only read.",
)
@_KEY_SOURCE
@_KEY_FILE
def import_yurthub(
    disk_cache_path: pathlib.Path, source: pathlib.Path, cache_key_source: str, cache_key_file: str
) -> None:
    """Fill the cache from an OpenYurt node's YurtHub cache (run while the hub is stopped)."""
    # This hub's own files, when both share the directory (as on a migrated node).
    tree = yurthubfiles.read(source, skip=yurthubfiles.OWN_FILES)
    objects = sum(len(members) for members in tree.objects.values())
    if not objects:
        click.echo(f"edgehub cache: no YurtHub objects under {source}", err=True)
        raise SystemExit(1)
    try:
        key_source = keysealing.parse_source(cache_key_source, cache_key_file)
    except keysealing.KeySourceError as e:
        click.echo(f"edgehub cache: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    try:
        asyncio.run(yurthubfiles.fill(disk_cache_path, tree, key_source))
    except store.StoreError as e:
        click.echo(f"edgehub cache: cannot write {disk_cache_path}: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    components = sorted({scope.component for scope in tree.objects})
    click.echo(
        f"imported {objects} objects and {len(tree.objects)} lists of "
        f"{', '.join(components)} from {source} into {disk_cache_path}"
        + (f"; skipped {len(tree.skipped)}:" if tree.skipped else "")
    )
    for line in tree.skipped[:20]:
        click.echo(f"  {line}")
    if len(tree.skipped) > 20:
        click.echo(f"  ... and {len(tree.skipped) - 20} more")
