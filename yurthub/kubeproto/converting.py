"""Kubernetes protobuf bodies -> the JSON-shaped dicts kube-apiserver's JSON answer gives.

PURE (bytes in, dicts out; no I/O). The cache stores protobuf objects as received and uses it
to index them (``skeleton``: only the fields the index needs) and to give JSON readers the
apiserver's JSON of them (``object``): selectors, patches, Tables, the JSON filters, leases.

How: the body's ``k8s\\x00`` envelope (``runtime.Unknown``) names apiVersion and kind;
``gofields.json`` maps them to the message; the message is parsed by the protobuf runtime (upb,
C) with descriptors compiled from the pinned API's ``generated.proto`` files
(``descriptors.py``), then walked into a dict by a per-message plan built once from the
descriptor and the Go facts of the same message (``gofields.json``: JSON name, pointer,
omitempty, inline). The rules are Go's ``encoding/json`` over what gogo-protobuf decodes:

- gogo writes every non-pointer scalar even when zero: a zero of a non-pointer ``omitempty``
  field is dropped, of a field without ``omitempty`` kept (``ready: false``,
  ``restartCount: 0``); a pointer present on the wire is kept whatever its value;
- an absent repeated/map field is Go's nil: dropped when ``omitempty``, ``null`` otherwise;
  absent non-pointer scalars/structs are Go zero values (written as such when not omitempty);
- structs are never dropped by ``omitempty`` (Go), so an unset ``Time`` is ``null``, unless
  the field is also ``omitzero`` (``ObjectMeta.creationTimestamp`` since 1.35): then it goes;
- ``Time`` -> RFC 3339 seconds in UTC, ``MicroTime`` -> 6 fractional digits, ``Duration`` ->
  Go's duration string, ``Quantity`` -> its string, ``IntOrString`` -> int or string,
  ``bytes`` -> base64, ``RawExtension``/``FieldsV1`` -> the JSON they hold (a nested protobuf
  object is converted), Go slice types (``Verbs``, ``ExtraValue``) -> lists, inline fields
  merged into their parent;
- map keys sorted (Go writes them so; upb hands entries out in hash order).

Errors: whatever cannot be converted (a kind outside the built-in API, e.g. a CRD, a
truncated or corrupt message, a RawExtension holding neither JSON nor protobuf) raises
``Undecodable`` naming the kind; never a partial result.

Cost: reading the descriptor set and the Go facts takes ~15 ms, and each descriptor file joins
the pool when a message of its is first needed (core/v1: ~5 ms); a node's kinds cost ~4.5 MB of
RSS. A hub whose clients speak JSON never pays. Plans are built once per message type. Threads
may share a converter (the cache writer converts, the tee checks end bookmarks on the event
loop, where the first check may thus load ~20 ms once): loading and plan building take a lock,
held briefly; conversions themselves take none. Converting costs ~3-5x ``orjson.loads`` of the
same object's JSON (Python walks each message): hence the cache writer's thread.
"""

from __future__ import annotations

import base64
import datetime
import importlib.resources
import json
import threading
import zlib
from collections.abc import Callable
from typing import Any

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from yurthub import jsonbytes
from yurthub.kubeproto import descriptors, enveloping, wire

MAGIC = enveloping.MAGIC
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

_META = "k8s.io.apimachinery.pkg.apis.meta.v1."
_WATCH_EVENT = _META + "WatchEvent"


class Undecodable(ValueError):
    """A protobuf body that does not convert; ``kind`` names what it claimed to be."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind or 'protobuf body'}: {reason}")
        self.kind = kind


def _rfc3339(seconds: int, nanos: int, micro: bool) -> str:
    when = datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=seconds)
    if micro:
        return f"{when:%Y-%m-%dT%H:%M:%S}.{nanos // 1000:06d}Z"
    return f"{when:%Y-%m-%dT%H:%M:%S}Z"


def go_duration(nanos: int) -> str:
    """Go's ``time.Duration.String()``: ``1h2m3.5s``, ``1.5ms``, ``0s``."""
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    n = abs(nanos)
    if n < 1000:
        return f"{sign}{n}ns"
    if n < 1_000_000:
        return sign + _fraction(n, 1000) + "\u00b5s"
    if n < 1_000_000_000:
        return sign + _fraction(n, 1_000_000) + "ms"
    hours, rest = divmod(n, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _fraction(rest, 1_000_000_000) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _fraction(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


# Field handling kinds of a plan (ints: compared in the hot loop).
(
    _SCALAR,
    _BYTES,
    _MESSAGE,
    _LIST,
    _LIST_BYTES,
    _LIST_MESSAGE,
    _MAP,
    _MAP_BYTES,
    _MAP_MESSAGE,
) = range(9)

Convert = Callable[[Any], Any]


_Field = tuple[str, int, bool, bool, Convert]
"""(JSON name, handling, drop a zero, inline, how to convert a message value)."""


class _Plan:
    __slots__ = ("absent", "fields")

    def __init__(self) -> None:
        self.fields: dict[Any, _Field] = {}
        """By field descriptor (upb hands out the same object each time: no number lookup)."""
        self.absent: list[tuple[str, Callable[[], Any]]] = []
        """Fields Go writes even when the wire lacks them: (JSON name, its value then)."""


Paths = dict[str, "Paths | None"]
"""JSON field names to keep, each with the names to keep inside it (None: the whole field)."""


class Converter:
    """Converts protobuf objects, lists and watch events of the built-in API to JSON dicts."""

    def __init__(self) -> None:
        self._pool: descriptor_pool.DescriptorPool | None = None
        self._files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
        """Files not in the pool yet."""
        self._file_of: dict[str, str] = {}
        self._kinds: dict[str, str] = {}
        self._go: dict[str, str] = {}
        """Each message's Go facts, as JSON."""
        self._classes: dict[str, type[message.Message]] = {}
        self._by_name: dict[str, Convert] = {}
        """Walks by message name, built and read with the lock held."""
        self._plans: dict[str, _Plan] = {}
        """Plans by message name (``skeleton``), written with their walks."""
        self._partials: dict[tuple[str, int], tuple[Paths, Convert]] = {}
        """Walks restricted to some fields (``skeleton``), by message name and fields."""
        self._walkers: dict[type, Convert] = {}
        self._identities: dict[str, tuple[int, int, int, int]] = {}
        """ObjectMeta field numbers by message name (``identity``)."""
        """Walks by message class, read without the lock (written once complete)."""
        self._times: dict[tuple[int, int, bool], str] = {}
        self._lock = threading.RLock()
        self._specials: dict[str, Convert] = {
            _META + "Time": self._time,
            _META + "MicroTime": self._micro_time,
            _META + "Duration": lambda m: go_duration(m.duration),
            _META + "FieldsV1": lambda m: self._embedded(m.Raw, "FieldsV1"),
            "k8s.io.apimachinery.pkg.api.resource.Quantity": lambda m: m.string,
            "k8s.io.apimachinery.pkg.util.intstr.IntOrString": (
                lambda m: m.strVal if m.type == 1 else m.intVal
            ),
            "k8s.io.apimachinery.pkg.runtime.RawExtension": (
                lambda m: self._embedded(m.raw, "RawExtension")
            ),
        }

    # --- loading --------------------------------------------------------------------------

    def _load(self) -> descriptor_pool.DescriptorPool:
        if self._pool is not None:
            return self._pool
        with self._lock:
            if self._pool is not None:
                return self._pool
            files = descriptor_pb2.FileDescriptorSet.FromString(
                zlib.decompress(base64.b64decode("".join(descriptors.PACKED)))
            )
            # Files join the pool when a message of theirs is first needed (with their imports):
            # a node's kinds touch a handful of the ~60 files (the pool of all costs 3.5 MB).
            self._files = {proto.name: proto for proto in files.file}
            for proto in files.file:
                for top in proto.message_type:
                    self._file_of[f"{proto.package}.{top.name}"] = proto.name
            pool = descriptor_pool.DescriptorPool()
            facts = json.loads(
                importlib.resources.files(__package__).joinpath("gofields.json").read_bytes()
            )
            self._kinds = facts["kinds"]
            # Kept as compact JSON, decoded when a message's walk is built: a node's kinds need
            # a few dozen of the ~1,200 messages (all decoded would hold ~1.5 MB of dicts).
            # (json.dumps: an orjson.dumps result keeps its whole output buffer, ~4 KB each.)
            self._go = {name: json.dumps(go) for name, go in facts["messages"].items()}
            del facts
            self._pool = pool
            return pool

    def _class(self, full_name: str) -> type[message.Message]:
        found = self._classes.get(full_name)
        if found is None:
            pool = self._load()
            with self._lock:
                file = self._file_of.get(full_name)
                if file is None:
                    raise Undecodable(full_name, "no such message in the API's descriptors")
                self._add_file(pool, file)
                desc = pool.FindMessageTypeByName(full_name)
                found = self._classes[full_name] = message_factory.GetMessageClass(desc)
        return found

    def _add_file(self, pool: descriptor_pool.DescriptorPool, name: str) -> None:
        proto = self._files.pop(name, None)
        if proto is None:
            return  # added already
        for dependency in proto.dependency:
            self._add_file(pool, dependency)
        pool.Add(proto)

    def message_name(self, api_version: str, kind: str) -> str | None:
        """The message of ``apiVersion``/``kind``, None outside the built-in API."""
        self._load()
        return self._kinds.get(f"{api_version}/{kind}")

    # --- public ---------------------------------------------------------------------------

    def envelope(self, body: wire.Buffer) -> tuple[str, str, wire.Buffer]:
        """(apiVersion, kind, raw message) of a ``k8s\\x00`` body."""
        api_version, kind, start, end = envelope_at(body)
        return api_version, kind, body[start:end]

    def object(self, body: wire.Buffer) -> dict[str, Any]:
        """A protobuf object or list body (envelope included) as the apiserver's JSON dict."""
        with self._lock:
            api_version, kind, raw = self.envelope(body)
            name = self.message_name(api_version, kind)
            what = f"{api_version}/{kind}"
            if name is None:
                raise Undecodable(what, "not a kind of the built-in API")
            try:
                parsed = self._class(name).FromString(raw)
                out = {"kind": kind, "apiVersion": api_version}
                out.update(self._message(parsed))
            except (message.DecodeError, UnicodeDecodeError, ValueError, RecursionError) as e:
                if isinstance(e, Undecodable):
                    raise
                raise Undecodable(what, f"does not decode: {e}") from e
            return out

    def split_list(self, body: wire.Buffer) -> SplitList | None:
        """A protobuf list body cut into its converted head and its items, each a view into
        ``body`` (no copy of a big list) converted only when asked (``SplitList.item``). None
        when the body is not a list of the built-in API with ``items`` (``object`` handles
        everything else)."""
        with self._lock:
            api_version, kind, start, end = envelope_at(body)
            name = self.message_name(api_version, kind) if kind.endswith("List") else None
            if name is None:
                return None
            what = f"{api_version}/{kind}"
            cls = self._class(name)
            items_field = cls.DESCRIPTOR.fields_by_name.get("items")
            if items_field is None or items_field.message_type is None:
                return None
            view = memoryview(body)
            try:
                head: list[wire.Buffer] = []
                items: list[memoryview] = []
                for number, wire_type, field_at, value_at, value_end in wire.offsets(
                    body, start, end
                ):
                    if number == items_field.number and wire_type == 2:
                        items.append(view[value_at:value_end])
                    else:
                        head.append(body[field_at:value_end])
                out: dict[str, Any] = {"kind": kind, "apiVersion": api_version}
                out.update(self._message(cls.FromString(b"".join(head))))
            except (wire.DecodeError, message.DecodeError, UnicodeDecodeError, ValueError) as e:
                if isinstance(e, Undecodable):
                    raise
                raise Undecodable(what, f"does not decode: {e}") from e
            except RecursionError as e:
                raise Undecodable(what, f"does not decode: {e}") from e
            out.pop("items", None)
            item_desc = items_field.message_type
            return SplitList(
                self, out, items, self._class(item_desc.full_name), _identity(item_desc)
            )

    def list_json(self, body: bytes) -> bytes | None:
        """A protobuf list body as the apiserver's JSON bytes, converted one item at a time
        (never the whole list as one decoded tree: a 10,000-pod list held that way took
        hundreds of MB). None as for ``split_list``."""
        split = self.split_list(body)
        if split is None:
            return None
        items = [jsonbytes.dumps(split.item(span)) for span in split.items]
        # The apiserver writes items last; its JSON has them even when there are none.
        return orjson.dumps(split.head)[:-1] + b',"items":[' + b",".join(items) + b"]}"

    def event(self, frame: bytes) -> dict[str, Any]:
        """One watch frame (a ``WatchEvent`` message, its length prefix removed) as the JSON
        event ``{"type": ..., "object": {...}}``."""
        event_type, body = self.event_parts(frame)
        return {"type": event_type, "object": self.object(body)}

    def event_parts(self, frame: bytes) -> tuple[str, bytes]:
        """(type, the object's enveloped protobuf body) of one watch frame, nothing converted."""
        with self._lock:
            try:
                parsed: Any = self._class(_WATCH_EVENT).FromString(frame)
            except message.DecodeError as e:
                raise Undecodable("WatchEvent", f"does not decode: {e}") from e
            return parsed.type, parsed.object.raw

    def identity(self, body: wire.Buffer) -> tuple[str, str, str, str, str]:
        """(apiVersion, kind, name, namespace, resourceVersion) of an enveloped protobuf object
        of the built-in API, read from its ObjectMeta on the wire without converting it."""
        with self._lock:
            api_version, kind, raw = self.envelope(body)
            name = self.message_name(api_version, kind)
            if name is None:
                raise Undecodable(f"{api_version}/{kind}", "not a kind of the built-in API")
            numbers = self._identities.get(name)
            if numbers is None:
                numbers = self._identities[name] = _identity(self._class(name).DESCRIPTOR)
            return (api_version, kind, *_read_identity(raw, numbers))

    def skeleton(self, body: wire.Buffer, paths: Paths) -> dict[str, Any]:
        """An enveloped object's ``kind``, ``apiVersion`` and only the fields ``paths`` names,
        each exactly as ``object`` would give it: what the cache's index needs (identity,
        labels, selectable fields) at the cost of a parse and a few field reads instead of a
        whole conversion."""
        api_version, kind, start, end = envelope_at(body)
        name = self.message_name(api_version, kind)
        what = f"{api_version}/{kind}"
        if name is None:
            raise Undecodable(what, "not a kind of the built-in API")
        out: dict[str, Any] = {"kind": kind, "apiVersion": api_version}
        out.update(self._skeleton(self._class(name), body[start:end], paths, what))
        return out

    def _skeleton(
        self, cls: type[message.Message], raw: wire.Bytes, paths: Paths, what: str
    ) -> dict[str, Any]:
        with self._lock:
            walk = self._restricted(cls.DESCRIPTOR, paths)
            try:
                out: dict[str, Any] = walk(cls.FromString(raw))
            except (message.DecodeError, UnicodeDecodeError, ValueError, RecursionError) as e:
                if isinstance(e, Undecodable):
                    raise
                raise Undecodable(what, f"does not decode: {e}") from e
            return out

    def _restricted(self, desc: Any, paths: Paths) -> Convert:
        """The walk of ``desc`` keeping only ``paths``: its plan with the other fields left
        out (so the same rules apply), built once per message type and paths."""
        key = (desc.full_name, id(paths))
        known = self._partials.get(key)
        if known is not None and known[0] is paths:
            return known[1]
        with self._lock:
            whole = self._resolve(desc)
            plan = self._plans.get(desc.full_name)
            if plan is None:  # a special or slice type: converted whole
                found = whole
            else:
                kept = _Plan()
                for fd, field in plan.fields.items():
                    name, handling = field[0], field[1]
                    if name not in paths:
                        continue
                    inner = paths[name]
                    if inner is not None and handling == _MESSAGE:
                        field = (*field[:4], self._restricted(fd.message_type, inner))
                    kept.fields[fd] = field
                kept.absent = [(n, value) for n, value in plan.absent if n in paths]
                found = _walk(kept)
            # Keyed by the paths' identity (callers pass the same dict each time: cheap to
            # find), which the entry keeps alive so the id is never reused for other paths.
            if len(self._partials) >= _MAX_PARTIALS:
                self._partials.clear()
            self._partials[key] = (paths, found)
        return found

    # --- walking --------------------------------------------------------------------------

    def _message(self, msg: Any) -> Any:
        with self._lock:
            walk = self._walkers.get(type(msg))
            if walk is None:
                with self._lock:
                    walk = self._resolve(msg.DESCRIPTOR)
                self._walkers[type(msg)] = walk
            return walk(msg)

    def _resolve(self, desc: Any) -> Convert:
        """How to convert messages of ``desc`` (the lock held): a special type's function, a
        slice type's, or a walk over the message's plan. Built once per type, with the walks
        of the messages it holds resolved at once (a type holding itself gets its own walk),
        so converting a field never looks its type up again."""
        found = self._by_name.get(desc.full_name)
        if found is not None:
            return found
        special = self._specials.get(desc.full_name)
        raw_go = self._go.get(desc.full_name)
        go: dict[str, Any] | None = None if raw_go is None else orjson.loads(raw_go)
        if special is not None:
            walk = special
        elif go is None:
            walk = _fails(desc.full_name, "no Go facts for this message")
        elif go.get("slice"):
            walk = self._items
        else:
            plan = _Plan()
            walk = _walk(plan)
            self._plans[desc.full_name] = plan
            # Registered before its plan is filled: a message holding its own type finds it.
            self._by_name[desc.full_name] = walk
            self._fill_plan(plan, desc, go.get("fields", {}))
        self._by_name[desc.full_name] = walk
        return walk

    def _items(self, msg: Any) -> list[Any]:
        """A Go slice type (``Verbs``, ``ExtraValue``): ``message { repeated items = 1; }``."""
        return list(msg.items)

    def _fill_plan(self, plan: _Plan, desc: Any, facts: dict[str, Any]) -> None:
        for fd in desc.fields:
            fact = facts.get(str(fd.number))
            if fact is None:
                continue
            pointer = bool(fact.get("pointer"))
            omit = bool(fact.get("omitempty"))
            omit_zero = bool(fact.get("omitzero"))
            inline = bool(fact.get("inline"))
            is_message = fd.type == fd.TYPE_MESSAGE
            convert: Convert | None = None
            if _repeated(fd):
                entry = fd.message_type if is_message else None
                if entry is not None and entry.GetOptions().map_entry:
                    value = entry.fields_by_name["value"]
                    if value.type == value.TYPE_MESSAGE:
                        handling = _MAP_MESSAGE
                        convert = self._resolve(value.message_type)
                    elif value.type == value.TYPE_BYTES:
                        handling = _MAP_BYTES
                    else:
                        handling = _MAP
                elif is_message:
                    handling = _LIST_MESSAGE
                    convert = self._resolve(fd.message_type)
                elif fd.type == fd.TYPE_BYTES:
                    handling = _LIST_BYTES
                else:
                    handling = _LIST
                if not omit:
                    plan.absent.append((fact["json"], _none))
            elif is_message:
                handling = _MESSAGE
                convert = self._resolve(fd.message_type)
                if not pointer and not inline and not omit_zero:
                    plan.absent.append((fact["json"], self._empty(fd.message_type)))
                elif pointer and not omit:
                    plan.absent.append((fact["json"], _none))
            else:
                handling = _BYTES if fd.type == fd.TYPE_BYTES else _SCALAR
                if pointer and not omit:
                    plan.absent.append((fact["json"], _none))
                elif not pointer and not omit:
                    plan.absent.append((fact["json"], _constant(_zero(fd))))
            drop_zero = (omit and not pointer) or omit_zero
            plan.fields[fd] = (fact["json"], handling, drop_zero, inline, convert or _same)

    def _empty(self, desc: Any) -> Callable[[], Any]:
        """Go's zero value of a non-pointer struct field the wire lacks (built when needed)."""
        return lambda: self._message(self._class(desc.full_name)())

    # --- special messages -----------------------------------------------------------------

    def _time(self, msg: Any) -> str | None:
        if not msg.seconds and not msg.nanos:
            return None  # the zero Time: Go writes null
        return self._format_time(msg.seconds, 0, False)

    def _micro_time(self, msg: Any) -> str | None:
        if not msg.seconds and not msg.nanos:
            return None
        return self._format_time(msg.seconds, msg.nanos, True)

    def _format_time(self, seconds: int, nanos: int, micro: bool) -> str:
        # The objects of a list share few distinct times (creation, conditions): remember them.
        key = (seconds, nanos, micro)
        found = self._times.get(key)
        if found is None:
            if len(self._times) >= 4096:
                self._times.clear()
            found = self._times[key] = _rfc3339(seconds, nanos, micro)
        return found

    def _embedded(self, raw: bytes, what: str) -> Any:
        if not raw:
            return None
        if raw.startswith(MAGIC):
            return self.object(raw)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise Undecodable(what, "holds neither JSON nor a protobuf object") from e


def envelope_at(body: wire.Buffer) -> tuple[str, str, int, int]:
    """(apiVersion, kind, start, end of the raw message) of a ``k8s\\x00`` body (its
    ``runtime.Unknown`` envelope), read by offset: nothing of a big body is copied."""
    if not body.startswith(MAGIC):
        raise Undecodable("", "no k8s protobuf magic")
    try:
        type_meta, raw = wire.spans(body, len(MAGIC), len(body), (1, 2))
        if type_meta is None:
            raise Undecodable("", "corrupt envelope: no type")
        api_version_at, kind_at = wire.spans(body, type_meta[0], type_meta[1], (1, 2))
        api_version = str(body[slice(*api_version_at)], "utf-8") if api_version_at else ""
        kind = str(body[slice(*kind_at)], "utf-8") if kind_at else ""
    except (wire.DecodeError, UnicodeDecodeError) as e:
        raise Undecodable("", f"corrupt envelope: {e}") from e
    start, end = raw if raw is not None else (0, 0)
    return api_version, kind, start, end


class SplitList:
    """A protobuf list: its head as JSON (``kind``, ``apiVersion``, ``metadata``; no
    ``items``) and its items' message bytes, converted one at a time on demand."""

    __slots__ = ("_converter", "_identity", "head", "item_class", "items")

    def __init__(
        self,
        converter: Converter,
        head: dict[str, Any],
        items: list[memoryview],
        item_class: type[message.Message],
        identity: tuple[int, int, int, int],
    ) -> None:
        self._converter = converter
        self.head = head
        self.items = items
        self.item_class = item_class
        self._identity = identity

    def item(self, span: wire.Bytes) -> dict[str, Any]:
        """One item as the apiserver's JSON for it inside the list (no kind/apiVersion)."""
        with self._converter._lock:
            what = f"{self.head['apiVersion']}/{self.head['kind']}"
            try:
                converted: dict[str, Any] = self._converter._message(
                    self.item_class.FromString(span)
                )
            except (message.DecodeError, UnicodeDecodeError, ValueError, RecursionError) as e:
                if isinstance(e, Undecodable):
                    raise
                raise Undecodable(what, f"an item does not decode: {e}") from e
            return converted

    def skeleton(self, span: wire.Bytes, paths: Paths) -> dict[str, Any]:
        """``Converter.skeleton`` of one item (no kind/apiVersion: they are the list's)."""
        what = f"{self.head['apiVersion']}/{self.head['kind']}"
        return self._converter._skeleton(self.item_class, span, paths, what)

    def identity(self, span: wire.Bytes) -> tuple[str, str, str]:
        """(name, namespace, resourceVersion) of an item, read from its ObjectMeta on the wire
        without converting it ("" for what is missing or unreadable)."""
        return _read_identity(span, self._identity)


def _read_identity(data: wire.Bytes, numbers: tuple[int, int, int, int]) -> tuple[str, str, str]:
    meta_number, name_number, namespace_number, rv_number = numbers
    if not meta_number:
        return "", "", ""
    try:
        # Read only up to the fields wanted (Go writes fields in number order): a reader that
        # finds nothing (another order) only makes the cache read the object further.
        (meta,) = wire.spans(data, 0, len(data), (meta_number,), in_order=True)
        if meta is None:
            return "", "", ""
        wanted = (name_number, namespace_number, rv_number)
        found = wire.spans(data, meta[0], meta[1], wanted, in_order=True)
        name, namespace, rv = (str(data[at[0] : at[1]], "utf-8") if at else "" for at in found)
    except (wire.DecodeError, UnicodeDecodeError):
        return "", "", ""
    return name, namespace, rv


def _identity(item: Any) -> tuple[int, int, int, int]:
    """Field numbers of ``metadata`` and of its name, namespace and resourceVersion (0: none)."""
    meta = item.fields_by_name.get("metadata")
    if meta is None or meta.message_type is None:
        return 0, 0, 0, 0
    fields = meta.message_type.fields_by_name
    numbers = [
        fields[n].number if n in fields else 0 for n in ("name", "namespace", "resourceVersion")
    ]
    return meta.number, numbers[0], numbers[1], numbers[2]


def _walk(plan: _Plan) -> Convert:
    """The hot path: one message into a dict, field by field as its plan says."""
    fields = plan.fields
    absent = plan.absent
    b64 = base64.b64encode

    def walk(msg: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for fd, value in msg.ListFields():
            f = fields.get(fd)
            if f is None:
                continue  # a field Go does not have (newer upstream): not in the JSON either
            name, handling, drop_zero, inline, convert = f
            if handling == _SCALAR:
                if drop_zero and not value:
                    continue
                out[name] = value
            elif handling == _MESSAGE:
                converted = convert(value)
                if converted is None and drop_zero:
                    continue  # omitzero (ObjectMeta.creationTimestamp): an unset Time goes
                if inline:
                    out.update(converted)
                    continue
                out[name] = converted
            elif handling == _LIST_MESSAGE:
                out[name] = [convert(v) for v in value]
            elif handling == _LIST:
                out[name] = list(value)
            # Go's encoding/json writes map keys sorted.
            elif handling == _MAP:
                out[name] = dict(sorted(value.items()))
            elif handling == _MAP_BYTES:
                out[name] = {k: b64(v).decode() for k, v in sorted(value.items())}
            elif handling == _MAP_MESSAGE:
                out[name] = {k: convert(v) for k, v in sorted(value.items())}
            elif handling == _BYTES:
                if drop_zero and not value:
                    continue
                out[name] = b64(value).decode()
            else:  # _LIST_BYTES
                out[name] = [b64(v).decode() for v in value]
        for name, default in absent:
            if name not in out:
                out[name] = default()
        return out

    return walk


_MAX_PARTIALS = 4096
"""Restricted walks kept (message types x distinct paths; a bound, not an expected size)."""


def _fails(kind: str, reason: str) -> Convert:
    def fail(msg: Any) -> Any:
        raise Undecodable(kind, reason)

    return fail


def _repeated(fd: Any) -> bool:
    # protobuf 6 has ``is_repeated`` and no ``label`` on upb descriptors; 4.x/5.x the opposite.
    found = getattr(fd, "is_repeated", None)
    if found is not None:
        return bool(found)
    return bool(fd.label == fd.LABEL_REPEATED)


def _same(value: Any) -> Any:
    return value


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def _none() -> None:
    return None


def _zero(fd: Any) -> Any:
    if fd.type == fd.TYPE_STRING:
        return ""
    if fd.type == fd.TYPE_BOOL:
        return False
    if fd.type == fd.TYPE_BYTES:
        return None  # a nil []byte
    if fd.type in (fd.TYPE_DOUBLE, fd.TYPE_FLOAT):
        return 0.0
    return 0
