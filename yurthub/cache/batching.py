"""One writer batch: the decisions of its jobs against the index plus an overlay, then the
writes, in one transaction (writer thread only).

Role: carry out ``applying``'s decisions for each job of a batch (``jobs``), keeping every
change in an overlay (``Outcome``) that later jobs of the same batch see; then write the overlay
inside the caller's transaction. The loop applies the ``Outcome`` to the index once the
transaction committed (``writing``); a failed one leaves index and disk as they were.

Invariants:

- A list replacement (its items, the objects it released, its list record) is one transaction:
  a kill -9 leaves the previous list or the new one, never half of each.
- A list record means "this list was seen whole": only a whole list response (the last page of
  a chunked one whose first page was seen) makes one. Watch events and BOOKMARKs only advance
  an existing record; pages before the last, and events of a watch whose list has no record,
  store their objects under a direct claim (gets can use them, no list is answered from them:
  a hub restarted on an empty cache sees clients re-watch without relisting). So every list
  owner an object names has a record, and the record's member count is exact (``verifying``).
- The index is only read here (through the overlay), never changed.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import diskcache

from yurthub.cache import (
    applying,
    coverage,
    entries,
    framing,
    index,
    jobs,
    keys,
    sealing,
    sqlrows,
    transcoding,
)
from yurthub.kubeproto import converting

logger = logging.getLogger(__name__)

PAGE_SESSION_TTL = 120.0
_PARTIAL = "PartialObjectMetadata"


def _row_scope(scope: keys.Scope, obj: Mapping[str, Any]) -> keys.Scope:
    """Where a Table row's object goes: metadata-only rows live in the partial scope."""
    if obj.get("kind") == _PARTIAL:
        version = str(obj.get("apiVersion") or "meta.k8s.io/v1").rpartition("/")[2] or "v1"
        return dataclasses.replace(scope, partial=version)
    return scope


@dataclasses.dataclass
class Outcome:
    """What one committed batch changed, applied to the index on the loop."""

    objects: dict[keys.ObjectKey, entries.Entry | None] = dataclasses.field(default_factory=dict)
    lists: dict[keys.ListKey, entries.ListRecord] = dataclasses.field(default_factory=dict)
    documents: set[str] = dataclasses.field(default_factory=set)
    dropped_lists: set[keys.ListKey] = dataclasses.field(default_factory=set)
    """List records removed (a member was corrupt)."""
    dropped_documents: set[str] = dataclasses.field(default_factory=set)
    dropped: set[str] = dataclasses.field(default_factory=set)
    """Names of ``jobs.DropCorrupt`` rows handled (deleted, or already gone)."""
    corrupt: set[str] = dataclasses.field(default_factory=set)
    """Rows found corrupt by the writer itself (a header-only rewrite): dropped next."""
    whole_lists: set[keys.ListKey] = dataclasses.field(default_factory=set)
    """Lists this batch saw whole (their records made or replaced): lost if it fails."""
    bad_bodies: int = 0
    refused_objects: int = 0
    error: str = ""
    reason: str = ""
    """Why the transaction failed, for operators (``failures.describe``); "" when it did not."""
    jobs: int = 0
    committed: bool = False
    """A transaction was written (False for a batch that changed nothing, or failed)."""


@dataclasses.dataclass
class PageSession:
    """A chunked list between its first page and its last (writer thread only)."""

    names: set[keys.ObjectKey]
    started: float
    direct: set[keys.ObjectKey] = dataclasses.field(default_factory=set)
    """Items its pages held by a direct claim they did not have before (the list had no record
    yet): at the last page that claim becomes the list's."""


class CorruptStored(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Batch:
    """Decisions of one batch against index + overlay, then the writes (writer thread only)."""

    def __init__(
        self,
        cache_index: index.Index,
        transcoder: transcoding.Transcoder,
        pages: dict[keys.ListKey, PageSession],
    ) -> None:
        self.index = cache_index
        self.transcoder = transcoder
        self.pages = pages
        """Chunked lists between their first page and their last (the writer's, kept
        across batches)."""
        self.outcome = Outcome()
        self.bodies: dict[keys.ObjectKey, entries.Body | None] = {}
        """New bodies; None: header-only rewrite (owners changed, body kept)."""
        self.counts: dict[str, int] = {}
        self.documents: dict[str, bytes] = {}

    def unchanged(self) -> bool:
        """Nothing to write: every job of the batch left the cache as it was."""
        outcome = self.outcome
        return not (
            outcome.objects
            or outcome.lists
            or outcome.dropped_lists
            or outcome.dropped_documents
            or self.documents
        )

    # overlay lookups

    def lookup(self, key: keys.ObjectKey) -> entries.Entry | None:
        if key in self.outcome.objects:
            return self.outcome.objects[key]
        return self.index.lookup(key)

    def record(self, list_key: keys.ListKey) -> entries.ListRecord | None:
        found = self.outcome.lists.get(list_key)
        if found is not None or list_key in self.outcome.dropped_lists:
            return found
        return self.index.lists.get(list_key)

    def has_record(self, list_key: keys.ListKey) -> bool:
        return self.record(list_key) is not None

    def scope_entries(
        self, list_key: keys.ListKey, wanted: coverage.Matcher
    ) -> Iterator[tuple[keys.ObjectKey, entries.Entry]]:
        """The objects of ``list_key``'s scope and namespace (index + overlay) ``wanted`` picks.

        A relist of a narrow list scans every object of a large scope: the index is read as it
        is, and a key made only for what ``wanted`` picks.
        """
        scope = list_key.scope
        overlay = self.outcome.objects
        touched: dict[str, set[str]] = {}
        for key in overlay:
            if key.scope == scope and list_key.covers_namespace(key.namespace):
                touched.setdefault(key.namespace, set()).add(key.name)
        for namespace, names in self.index.namespaces(scope, list_key.namespace):
            skip = touched.get(namespace)
            for name, entry in names.items():
                if skip and name in skip:
                    continue  # the overlay's entry is the current one
                if wanted(namespace, name, entry):
                    yield keys.ObjectKey(scope, namespace, name), entry
        for namespace, changed in touched.items():
            for name in changed:
                key = keys.ObjectKey(scope, namespace, name)
                found = overlay[key]
                if found is not None and wanted(namespace, name, found):
                    yield key, found

    def members(self, list_key: keys.ListKey) -> list[keys.ObjectKey]:
        """Current members of ``list_key`` (index + overlay)."""
        owner = str(list_key)
        found = [
            key
            for key, entry in self.index.objects(list_key.scope, list_key.namespace, ordered=False)
            if owner in entry.owners and key not in self.outcome.objects
        ]
        found.extend(
            key
            for key, entry in self.outcome.objects.items()
            if entry is not None
            and owner in entry.owners
            and key.scope == list_key.scope
            and list_key.covers_namespace(key.namespace)
        )
        return found

    def member_count(self, list_key: keys.ListKey) -> int:
        owner = str(list_key)
        if owner not in self.counts:
            record = self.record(list_key)
            base = record.members if record is not None else len(self.members(list_key))
            self.counts[owner] = base
            return base
        return self.counts[owner]

    def change(self, change: applying.Change) -> None:
        before = self.lookup(change.key)
        after = change.entry if isinstance(change, applying.Write) else None
        before_owners = before.owners if before is not None else frozenset()
        after_owners = after.owners if after is not None else frozenset()
        for owner in before_owners ^ after_owners:
            if owner == entries.DIRECT:
                continue
            list_key = keys.parse_list_key(owner)
            count = self.member_count(list_key)
            self.counts[owner] = count + (1 if owner in after_owners else -1)
        self.outcome.objects[change.key] = after
        if isinstance(change, applying.Write):
            if change.body is not None or change.key not in self.bodies:
                self.bodies[change.key] = change.body
        else:
            self.bodies.pop(change.key, None)

    def touch_list(
        self,
        list_key: keys.ListKey,
        resource_version: str,
        kind: str,
        api_version: str,
        *,
        create: bool = False,
        columns: tuple[Any, ...] | None = None,
    ) -> None:
        """Advance ``list_key``'s record; make it only when ``create`` (a whole list was seen).
        ``columns``: a Table's column definitions (None keeps the record's)."""
        current = self.record(list_key)
        if current is None and not create:
            return
        if create:
            self.outcome.whole_lists.add(list_key)
        self.outcome.dropped_lists.discard(list_key)
        rv = entries.parse_rv(resource_version)
        if current is not None:
            if not resource_version or (0 <= rv < current.rv):
                resource_version, rv = current.resource_version, current.rv
            kind = kind or current.kind
            api_version = api_version or current.api_version
            columns = columns if columns is not None else current.columns
        self.outcome.lists[list_key] = entries.ListRecord(
            resource_version=resource_version,
            rv=rv,
            kind=kind,
            api_version=api_version,
            members=self.member_count(list_key),
            columns=columns,
        )

    # jobs

    def run(self, job: jobs.Job) -> None:
        if isinstance(job, jobs.PutObject):
            self.put_object(job)
        elif isinstance(job, jobs.PutList):
            self.put_list(job)
        elif isinstance(job, jobs.WatchLines):
            self.watch_lines(job)
        elif isinstance(job, jobs.InitialEvents):
            self.initial_events(job)
        elif isinstance(job, jobs.DropCorrupt):
            self.drop_corrupt(job)
        else:
            self.documents[job.key] = entries.encode_document(job.content_type, job.body)
            self.outcome.dropped_documents.discard(job.key)

    def drop_corrupt(self, job: jobs.DropCorrupt) -> None:
        for name in job.names:
            self.outcome.dropped.add(name)
            if keys.is_nonresource_key(name):
                self.documents.pop(name, None)
                self.outcome.dropped_documents.add(name)
                continue
            if keys.is_list_key(name):
                try:
                    self.drop_list(keys.parse_list_key(name))
                except keys.BadKey:
                    self.outcome.dropped_documents.add(name)  # deleted by name all the same
                continue
            try:
                key = keys.parse_object_key(name)
            except keys.BadKey:
                self.outcome.dropped_documents.add(name)
                continue
            current = self.lookup(key)
            if current is None:
                self.outcome.dropped_documents.add(name)  # not indexed: delete the row anyway
                continue
            for owner in sorted(current.owners - {entries.DIRECT}):
                self.drop_list(keys.parse_list_key(owner))
            self.change(applying.Remove(key))

    def drop_list(self, list_key: keys.ListKey) -> None:
        """Forget that ``list_key`` was seen whole: its record goes, its members lose its claim
        (held by a direct claim when nothing else holds them: a get may still use them)."""
        if self.record(list_key) is None:
            return
        owner = str(list_key)
        for key in self.members(list_key):
            current = self.lookup(key)
            if current is None:
                continue
            remaining = current.owners - {owner} or frozenset({entries.DIRECT})
            self.change(applying.Write(key, current.with_owners(remaining), None))
        self.outcome.lists.pop(list_key, None)
        self.outcome.dropped_lists.add(list_key)
        logger.warning("cache: list %s is no longer whole (a member was corrupt)", owner)

    def put_object(self, job: jobs.PutObject) -> None:
        if job.protobuf:
            try:
                indexed = self.transcoder.indexed(job.body, job.scope.resource)
            except converting.Undecodable as e:
                self.transcoder.failed(e)
                raise framing.BadBody(f"protobuf object does not decode: {e}") from e
            assert indexed is not None  # ``_as_json`` converted views
            self._put_one(job.scope, indexed, job.body, job.namespace, job.name, job.local)
            return
        obj = framing.parse_object(job.body)
        if obj.get("kind") == "Table":
            for row in framing.table_rows(obj):
                self._put_one(
                    _row_scope(job.scope, row.object),
                    row.object,
                    row.raw,
                    job.namespace,
                    job.name,
                    cells=row.cells,
                )
            return
        self._put_one(_row_scope(job.scope, obj), obj, job.body, job.namespace, job.name, job.local)

    def _put_one(
        self,
        scope: keys.Scope,
        obj: dict[str, Any],
        body: entries.Body,
        namespace: str,
        name: str,
        local: bool = False,
        *,
        cells: tuple[Any, ...] | None = None,
    ) -> None:
        item = applying.item_from_object(
            scope, obj, body, fallback_namespace=namespace, cells=cells
        )
        try:
            applying.check_identity(item, name, namespace)
        except applying.WrongObject as e:
            self.outcome.refused_objects += 1
            logger.warning("cache: not storing %s: %s", item.key, e)
            return
        change = applying.apply_object(
            self.lookup(item.key), item, entries.DIRECT, same_version_differs=local
        )
        if change is not None:
            self.change(change)

    def _items(
        self, list_key: keys.ListKey, parsed: Iterable[framing.ListItem], seen: set[keys.ObjectKey]
    ) -> Iterator[applying.Item]:
        """Items that may change the cache; unchanged ones only go into ``seen``.

        A relist mostly repeats what is stored: same name, same resourceVersion, same claim.
        Those are recognised without decoding the object.
        """
        owner = str(list_key)
        scope = list_key.scope
        namespace = list_key.namespace if scope.namespaced_keys else ""
        for item in parsed:
            if namespace and item.namespace and item.namespace != namespace:
                self.outcome.refused_objects += 1
                raise framing.BadBody(
                    f"list of namespace {namespace!r} holds an object of {item.namespace!r}"
                )
            if item.name:
                key = keys.object_key(scope, item.namespace or list_key.namespace, item.name)
                current = self.lookup(key)
                if (
                    current is not None
                    and owner in current.owners
                    and 0 <= entries.parse_rv(item.resource_version) == current.rv
                    and (item.cells is None or current.cells is not None)
                ):
                    seen.add(key)
                    continue
            try:
                yield applying.item_from_object(
                    scope,
                    item.object,
                    item.stored,
                    fallback_namespace=list_key.namespace,
                    cells=item.cells,
                )
            except applying.NotStorable as e:
                # A list is stored whole or not at all: one it would answer incomplete is none.
                raise framing.BadBody(f"list item not storable: {e}") from e

    def _parse_list(self, job: jobs.PutList) -> tuple[framing.ListHead, Iterator[framing.ListItem]]:
        if not job.protobuf:
            return framing.parse_list(job.body)
        transcoder = self.transcoder
        split = transcoder.parse_list(job.body, job.list_key.scope.resource)
        if split is not None:
            return split
        # Not a list with items (a Table, another view): converted whole, then read as JSON.
        body = transcoder.body(job.body)
        if body is None:
            raise framing.BadBody("a protobuf list body that does not convert")
        return framing.parse_list(body)

    def put_list(self, job: jobs.PutList) -> None:
        list_key = job.list_key
        # The body says what it is (some servers send a bare application/json for views). A 2xx
        # whose body is no list (a Status, an object) neither makes nor replaces a list record.
        head, parsed = self._parse_list(job)
        if head.kind != "Table" and (not head.kind.endswith("List") or not head.has_items):
            raise framing.BadBody(f"a list response whose body is a {head.kind or 'no kind'}")
        columns = None
        if head.kind == "Table":
            head, rows = framing.parse_table(job.body)
            columns = head.columns
            # The rows are full objects with includeObject=Object, else metadata only.
            kind = str(rows[0].object.get("kind", "")) if rows else _PARTIAL
            head = dataclasses.replace(head, kind=f"{kind}List")
            parsed = iter(rows)
        list_key = dataclasses.replace(
            list_key,
            scope=_row_scope(
                list_key.scope, {"kind": head.item_kind, "apiVersion": head.api_version}
            ),
        )
        pages = self.pages
        now = time.monotonic()
        for stale in [k for k, s in pages.items() if now - s.started > PAGE_SESSION_TTL]:
            del pages[stale]
        session = pages.get(list_key)
        unchanged: set[keys.ObjectKey] = set()
        items = list(self._items(list_key, parsed, unchanged))
        later_page = job.continued is True or (job.continued is None and session is not None)
        touch = (list_key, head.resource_version, head.item_kind, head.api_version)
        if head.continue_token:
            # One page of a chunked list: store its items, release nothing until the last page.
            if not later_page or session is None:
                session = pages[list_key] = PageSession(set(), now)
            session.names.update(item.key for item in items)
            session.names.update(unchanged)
            self._claim(list_key, items, session)
            self.touch_list(*touch, columns=columns)
            return
        if later_page and session is None:
            # The last page of a list whose first pages we never saw: keep, release nothing; it
            # proves no list whole, so it makes no record.
            self._claim(list_key, items, None)
            self.touch_list(*touch, columns=columns)
            return
        if later_page and session is not None:
            del pages[list_key]
            keep = session.names | unchanged
            self._adopt(list_key, session)
        else:
            pages.pop(list_key, None)
            keep = unchanged
        self._replace_whole(list_key, items, keep, head.resource_version)
        self.touch_list(*touch, create=True, columns=columns)

    def _replace_whole(
        self,
        list_key: keys.ListKey,
        items: list[applying.Item],
        keep: set[keys.ObjectKey],
        resource_version: str,
    ) -> None:
        """A list seen whole: it is authoritative for everything its selector covers."""
        list_rv = entries.parse_rv(resource_version)
        candidates = self.scope_entries(list_key, applying.concerned(list_key))
        for change in applying.replace_list(
            self.lookup, candidates, items, list_key, list_rv, keep
        ):
            self.change(change)

    def initial_events(self, job: jobs.InitialEvents) -> None:
        """A completed streaming list is as good as a list response: replace what it covers and
        make the list answerable. Anything but ADDED events and one end BOOKMARK (a view, an
        undecodable line) and the events are applied one by one instead, as any watch's."""
        list_key = job.list_key
        found = self._initial_protobuf(job) if job.protobuf else self._initial_json(job)
        if found is None:
            self.watch_lines(jobs.WatchLines(list_key, job.lines))
            return
        if isinstance(found, jobs.InitialEvents):
            self.initial_events(found)  # converted whole: now JSON
            return
        listed, end_rv, kind, api_version = found
        self.pages.pop(list_key, None)
        unchanged: set[keys.ObjectKey] = set()
        items = list(self._items(list_key, iter(listed), unchanged))
        self._replace_whole(list_key, items, unchanged, end_rv)
        self.touch_list(list_key, end_rv, kind, api_version, create=True)

    def _initial_json(
        self, job: jobs.InitialEvents
    ) -> tuple[list[framing.ListItem], str, str, str] | None:
        """(items, end resourceVersion, kind, apiVersion) of a JSON streaming list; None: not
        a plain one (a view, another event type, an undecodable line)."""
        listed: list[framing.ListItem] = []
        end_rv = kind = api_version = ""
        for line in job.lines:
            try:
                event = framing.parse_event(line)
            except framing.BadBody:
                return None
            obj_kind = str(event.object.get("kind") or "")
            if obj_kind in ("Table", _PARTIAL):
                return None
            if event.type == "ADDED":
                listed.append(framing.ListItem.of(event.object, event.raw))
                continue
            meta = event.object.get("metadata")
            if event.type != "BOOKMARK" or not isinstance(meta, dict):
                return None
            end_rv = str(meta.get("resourceVersion") or "")
            kind, api_version = obj_kind, str(event.object.get("apiVersion") or "")
        if not end_rv:
            return None
        return listed, end_rv, kind, api_version

    def _initial_protobuf(
        self, job: jobs.InitialEvents
    ) -> tuple[list[framing.ListItem], str, str, str] | jobs.InitialEvents:
        """A protobuf streaming list's items, converted lazily; else the job converted whole
        (to JSON, all or nothing) for the JSON path."""
        transcoder = self.transcoder
        found = transcoder.initial_list(job.lines, job.list_key.scope.resource)
        if found is not None:
            return found
        lines = transcoder.events(job.lines, whole=True)
        if lines is None:
            raise framing.BadBody("a protobuf streaming list that does not convert")
        return dataclasses.replace(job, lines=lines, protobuf=False)

    def _claim(
        self, list_key: keys.ListKey, items: list[applying.Item], session: PageSession | None
    ) -> None:
        """Items of one page: the list's when it has a record. A list without one owns nothing
        yet (an owner always names a record): its items are held by a direct claim, which the
        last page turns into the list's (``_adopt``)."""
        recorded = self.has_record(list_key)
        owner = str(list_key) if recorded else entries.DIRECT
        for item in items:
            current = self.lookup(item.key)
            if (
                not recorded
                and session is not None
                and (current is None or entries.DIRECT not in current.owners)
            ):
                session.direct.add(item.key)
            change = applying.apply_object(current, item, owner)
            if change is not None:
                self.change(change)

    def _adopt(self, list_key: keys.ListKey, session: PageSession) -> None:
        """The last page: every earlier page's item becomes the list's."""
        for key in session.names:
            change = applying.adopt(self.lookup(key), key, list_key, key in session.direct)
            if change is not None:
                self.change(change)

    def watch_lines(self, job: jobs.WatchLines) -> None:
        events: list[tuple[framing.WatchEvent, tuple[Any, ...] | None]] = []
        if job.protobuf:
            transcoder = self.transcoder
            failures = transcoder.failures
            found = transcoder.watch_events(job.lines, job.list_key.scope.resource)
            events.extend((event, None) for event in found)
            self.outcome.bad_bodies += transcoder.failures - failures
            self._events(job.list_key, events, advance=not job.snapshot)
            return
        for line in job.lines:
            try:
                events.append((framing.parse_event(line), None))
            except framing.BadBody:
                self.outcome.bad_bodies += 1
        self._events(job.list_key, events, advance=not job.snapshot)

    def _events(
        self,
        list_key: keys.ListKey,
        events: Iterable[tuple[framing.WatchEvent, tuple[Any, ...] | None]],
        *,
        advance: bool = True,
    ) -> None:
        """Watch events (with the cells of the Table row each came in, if any), in order.
        ``advance``: the last event's version becomes the list's (False: a streaming list's
        initial events cut short, ``jobs.WatchLines.snapshot``)."""
        # A watch never makes a list whole: without the list's record its events are held like
        # gets (a hub restarted on an empty cache sees clients re-watch without relisting).
        owner = str(list_key) if self.has_record(list_key) else entries.DIRECT
        last_rv = ""
        kind = api_version = ""
        for event, cells in events:
            meta = event.object.get("metadata")
            rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
            if event.type == "ERROR":
                continue
            if event.type == "BOOKMARK":
                last_rv = rv or last_rv
                if event.object.get("kind") not in ("Table", _PARTIAL):
                    kind = str(event.object.get("kind") or kind)
                    api_version = str(event.object.get("apiVersion") or api_version)
                continue
            if event.object.get("kind") == "Table":
                self._table_event(list_key, event)
                continue
            if event.object.get("kind") == _PARTIAL and not list_key.scope.partial:
                self._table_event(list_key, event, rows=False)
                continue
            try:
                item = applying.item_from_object(
                    list_key.scope,
                    event.object,
                    event.raw,
                    fallback_namespace=list_key.namespace,
                    cells=cells,
                )
            except applying.NotStorable:
                if event.type != "DELETED":
                    last_rv = rv or last_rv
                    continue
                # A DELETED object the cache cannot decode (a Status) still names what goes.
                meta_map = meta if isinstance(meta, dict) else {}
                name = meta_map.get("name")
                if not isinstance(name, str) or not name:
                    continue
                key = keys.object_key(
                    list_key.scope, str(meta_map.get("namespace") or list_key.namespace), name
                )
                change = applying.apply_deleted(self.lookup(key), key, list_key)
            else:
                try:
                    applying.check_identity(item, "", list_key.namespace)
                except applying.WrongObject as e:
                    self.outcome.refused_objects += 1
                    logger.warning("cache: not storing a watch event's %s: %s", item.key, e)
                    continue
                kind, api_version = item.entry.kind or kind, item.entry.api_version or api_version
                if event.type == "DELETED":
                    change = applying.apply_deleted(self.lookup(item.key), item.key, list_key)
                elif event.type in ("ADDED", "MODIFIED"):
                    change = applying.apply_object(self.lookup(item.key), item, owner)
                else:
                    self.outcome.bad_bodies += 1
                    continue
            last_rv = rv or last_rv
            if change is not None:
                self.change(change)
        if not advance:
            last_rv = ""
        if kind or last_rv:
            self.touch_list(list_key, last_rv, kind, api_version)

    def _table_event(
        self, list_key: keys.ListKey, event: framing.WatchEvent, *, rows: bool = True
    ) -> None:
        """A view event (a Table, or metadata only): apply its objects where they belong, each
        with its row's cells; a Table's column definitions update its list's record."""
        if rows:
            found = framing.table_rows(event.object)
            columns = framing.table_columns(event.object)
        else:
            found, columns = [framing.ListItem.of(event.object, event.raw)], None
        for row in found:
            row_key = dataclasses.replace(list_key, scope=_row_scope(list_key.scope, row.object))
            row_event = framing.WatchEvent(event.type, row.object, row.raw)
            self._events(row_key, [(row_event, row.cells)])
            if columns is not None:
                self.touch_list(row_key, "", "", "", columns=columns)

    # writing (inside the transaction)

    def write(self, cache: diskcache.Cache, sealer: sealing.Sealer) -> None:
        # A list replacement can remove objects other lists own: their records' counts change.
        for owner, count in self.counts.items():
            list_key = keys.parse_list_key(owner)
            record = self.record(list_key)
            if record is not None and record.members != count:
                self.outcome.lists.setdefault(list_key, record)
        for list_key in self.outcome.dropped_lists:
            sqlrows.delete_row(cache, str(list_key))
        for name in self.outcome.dropped_documents:
            sqlrows.delete_row(cache, name)
        for key, entry in self.outcome.objects.items():
            name = str(key)
            if entry is None:
                sqlrows.delete_row(cache, name)
                continue
            body = self.bodies.get(key)
            if body is None:
                try:
                    value = sqlrows.raw_get(cache, name)
                    if value is None:
                        raise sqlite3.DatabaseError(f"entry {name!r} vanished under the writer")
                    body = sealer.body(name, value)
                except entries.CorruptEntry as e:
                    raise CorruptStored(name) from e
            cache.set(name, sealer.seal(name, entries.encode_object(entry, body)))
        for list_key, record in self.outcome.lists.items():
            record = dataclasses.replace(record, members=self.member_count(list_key))
            self.outcome.lists[list_key] = record
            name = str(list_key)
            cache.set(name, sealer.seal(name, entries.encode_list(record)))
        for doc_key, value in self.documents.items():
            cache.set(doc_key, sealer.seal(doc_key, value))
            self.outcome.documents.add(doc_key)
