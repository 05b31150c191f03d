"""Server-side apply field ownership: ``metadata.managedFields`` as the apiserver keeps it.

PURE: objects, the stored managedFields and a clock reading in; the new object and the new
managedFields out (or an ``ApiError`` 409 listing the conflicts). Nothing is mutated.

The model is the apiserver's (structured-merge-diff):

- A *field set* is a set of paths; a path is a tuple of FieldsV1 elements: ``f:<field>``,
  ``k:<json of the key fields>`` (an item of an associative list), ``v:<json>`` (an item
  of a set list). ``encode_set``/``decode_set`` turn it into FieldsV1 (``{}`` for a member
  leaf, ``".": {}`` for a member that also has children).
- Each manager (manager, operation, apiVersion for Update, subresource) owns a set.
  ``apply`` merges the applied configuration into the live object, removes what this
  manager applied last time but no longer does (unless someone else owns it), and
  refuses with 409 when a field another manager owns would change, unless ``force``
  (which takes it). ``update`` (create, PUT, non-apply PATCH) gives the writer every
  field it added or changed and takes them from everyone else; removed fields leave
  every set. Entries left with nothing are dropped.
- Never owned: apiVersion, kind, metadata's name, namespace, uid, resourceVersion,
  generation, creationTimestamp, selfLink and managedFields; on a main resource with a
  status subresource, ``status`` (and on the status subresource only ``status`` is).

What the simulator knows of schemas (``shape_for``):

- Custom resources: the CRD version's ``openAPIV3Schema``: ``x-kubernetes-list-type``
  (``atomic``, the default; ``set``; ``map`` with ``x-kubernetes-list-map-keys``),
  ``x-kubernetes-map-type: atomic``, ``properties`` (declared fields) against
  ``additionalProperties`` / ``x-kubernetes-preserve-unknown-fields`` (keys that are
  members themselves). ``metadata`` is ObjectMeta's, as for built-in kinds.
- Built-in kinds: the lists ``patching.merge_key`` knows are associative on that key
  (containers, env, volumes by name; conditions by type; ownerReferences by uid; ...),
  container ports by (containerPort, protocol) and Service ports by (port, protocol),
  protocol defaulting to TCP as the apiserver's defaulting does; finalizers a set; every
  other list atomic; every map granular with all its keys taken as declared fields.
- A list whose items do not carry their keys is treated as atomic (never an error).

Bounds: work and sets are linear in the size of the objects, which the request body
limit already bounds; at most ten Update entries (older ones merge into
``ancient-changes``, as in the apiserver) and ``MAX_ENTRIES`` in all (beyond: 422).
Element order (FieldsV1 keys, conflict listing) follows the apiserver's for fields; keys
and values are ordered by their JSON text, which can differ from it for numbers.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from yurthub import statuses
from yurthub.testing.sim import errors, objectmeta, patching

Path = tuple[str, ...]
FieldSet = frozenset[Path]
APPLY = "Apply"
UPDATE = "Update"
FIELDS_V1 = "FieldsV1"
MAX_MANAGER_BYTES = 128
MAX_UPDATE_MANAGERS = 10
MAX_ENTRIES = 1000
ANCIENT_CHANGES = "ancient-changes"
_MISSING: Any = object()

# Paths nobody owns (the apiserver's stripped meta fields).
_STRIPPED: frozenset[Path] = frozenset(
    {
        ("f:apiVersion",),
        ("f:kind",),
        ("f:metadata",),
        *(
            ("f:metadata", f"f:{name}")
            for name in (
                "name",
                "namespace",
                "creationTimestamp",
                "selfLink",
                "uid",
                "clusterName",
                "generation",
                "resourceVersion",
            )
        ),
    }
)
_STRIPPED_TREES: tuple[Path, ...] = (("f:metadata", "f:managedFields"),)


# --- shapes: what is known of a schema ---------------------------------------------------


class Shape(Protocol):
    """One node of an object's schema, as far as field management needs it."""

    def field(self, name: str) -> Shape: ...

    def declares(self, name: str) -> bool: ...

    def item(self) -> Shape: ...

    @property
    def list_type(self) -> str: ...  # "atomic" | "set" | "map"

    @property
    def list_keys(self) -> tuple[str, ...]: ...

    @property
    def key_defaults(self) -> Mapping[str, Any]: ...

    @property
    def atomic_map(self) -> bool: ...


_NO_DEFAULTS: Mapping[str, Any] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class BuiltinShape:
    """A built-in kind's node at ``path`` (field names only, list items not counted)."""

    kind: str
    path: tuple[str, ...] = ()

    def field(self, name: str) -> Shape:
        return BuiltinShape(self.kind, (*self.path, name))

    def declares(self, name: str) -> bool:
        return True

    def item(self) -> Shape:
        return self

    @property
    def list_type(self) -> str:
        if patching.is_primitive_set(self.path):
            return "set"
        return "map" if self.list_keys else "atomic"

    @property
    def list_keys(self) -> tuple[str, ...]:
        key = patching.merge_key(self.kind, self.path)
        if key in ("containerPort", "port"):
            return (key, "protocol")
        return (key,) if key else ()

    @property
    def key_defaults(self) -> Mapping[str, Any]:
        return {"protocol": "TCP"} if "protocol" in self.list_keys else _NO_DEFAULTS

    @property
    def atomic_map(self) -> bool:
        return False


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaShape:
    """A node of a CRD's structural schema (``openAPIV3Schema``); ``{}``: deduced."""

    schema: Mapping[str, Any]
    root: bool = False

    def _props(self) -> Mapping[str, Any]:
        props = self.schema.get("properties")
        return props if isinstance(props, Mapping) else {}

    def field(self, name: str) -> Shape:
        if self.root and name == "metadata":
            return BuiltinShape("", ("metadata",))
        sub = self._props().get(name)
        if isinstance(sub, Mapping):
            return SchemaShape(sub)
        extra = self.schema.get("additionalProperties")
        return SchemaShape(extra if isinstance(extra, Mapping) else {})

    def declares(self, name: str) -> bool:
        return name in self._props() or (self.root and name in ("apiVersion", "kind", "metadata"))

    def item(self) -> Shape:
        items = self.schema.get("items")
        return SchemaShape(items if isinstance(items, Mapping) else {})

    @property
    def list_type(self) -> str:
        kind = self.schema.get("x-kubernetes-list-type")
        if kind == "map" and self.list_keys:
            return "map"
        return "set" if kind == "set" else "atomic"

    @property
    def list_keys(self) -> tuple[str, ...]:
        keys = self.schema.get("x-kubernetes-list-map-keys") or ()
        return tuple(str(k) for k in keys) if isinstance(keys, list) else ()

    @property
    def key_defaults(self) -> Mapping[str, Any]:
        item_props = self.item()
        assert isinstance(item_props, SchemaShape)
        return {
            k: sub["default"]
            for k, sub in item_props._props().items()
            if k in self.list_keys and isinstance(sub, Mapping) and "default" in sub
        }

    @property
    def atomic_map(self) -> bool:
        return self.schema.get("x-kubernetes-map-type") == "atomic"


def shape_for(kind: str, schema: Mapping[str, Any] | None, *, custom: bool) -> Shape:
    """The shape of a ``kind`` object: its CRD schema for custom resources."""
    if custom:
        return SchemaShape(schema or {}, root=True)
    return BuiltinShape(kind)


# --- path elements ------------------------------------------------------------------------


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


_RANK = {"f": 0, "k": 1, "v": 2, "i": 3}


def _order(element: str) -> tuple[int, str]:
    return _RANK.get(element[:1], 4), element[2:]


def describe(path: Path) -> str:
    """A path as the apiserver prints it: ``.spec.containers[name="c"].image``."""
    out = []
    for element in path:
        kind, text = element[:1], element[2:]
        if kind == "f":
            out.append("." + text)
        elif kind == "k":
            fields = json.loads(text)
            out.append("[" + ",".join(f"{k}={_scalar(v)}" for k, v in fields.items()) + "]")
        elif kind == "v":
            out.append(f"[={_scalar(json.loads(text))}]")
        else:
            out.append(f"[{text}]")
    return "".join(out)


def _scalar(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else _json(value)


# --- sets <-> FieldsV1 ----------------------------------------------------------------------


def encode_set(paths: Iterable[Path]) -> dict[str, Any]:
    """FieldsV1 of a set of paths."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for element in path:
            node = node.setdefault(element, {})
        node["."] = {}
    return _finish(tree)


def _finish(node: dict[str, Any]) -> dict[str, Any]:
    children = {k: v for k, v in node.items() if k != "."}
    out: dict[str, Any] = {}
    if "." in node and children:
        out["."] = {}
    for key in sorted(children, key=_order):
        out[key] = _finish(children[key])
    return out


def decode_set(fields: Any, prefix: Path = ()) -> set[Path]:
    """The paths of a FieldsV1 document; raises ``ValueError`` on a malformed one."""
    if not isinstance(fields, Mapping):
        raise ValueError("FieldsV1 must be an object")
    out: set[Path] = set()
    for key, sub in fields.items():
        if key == ".":
            if prefix:
                out.add(prefix)
            continue
        if not isinstance(key, str) or key[:2] not in ("f:", "k:", "v:", "i:"):
            raise ValueError(f"invalid FieldsV1 key {key!r}")
        path = (*prefix, key)
        if isinstance(sub, Mapping) and not sub:
            out.add(path)
        else:
            out |= decode_set(sub, path)
    return out


def iterate(paths: Iterable[Path]) -> list[Path]:
    """Paths in the apiserver's order: at each level the members first, then the subtrees."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for element in path:
            node = node.setdefault(element, {})
        node["."] = {}
    out: list[Path] = []

    def walk(node: dict[str, Any], prefix: Path) -> None:
        keys = sorted((k for k in node if k != "."), key=_order)
        out.extend((*prefix, k) for k in keys if "." in node[k])
        for k in keys:
            walk(node[k], (*prefix, k))

    walk(tree, ())
    return out


def _owned(path: Path) -> bool:
    if path in _STRIPPED:
        return False
    return not any(path[: len(t)] == t for t in _STRIPPED_TREES)


def _filter(paths: Iterable[Path], subresource: str, has_status: bool) -> set[Path]:
    out = {p for p in paths if p and _owned(p)}
    if subresource == "status":
        return {p for p in out if p[0] == "f:status"}
    if has_status and not subresource:
        return {p for p in out if p[0] != "f:status"}
    return out


# --- items of sets and associative lists --------------------------------------------------


def _list_mode(shape: Shape, value: Any) -> str:
    """How a list value is handled; "atomic" when its items do not fit the schema."""
    if not isinstance(value, list):
        return "atomic"
    mode = shape.list_type
    if mode == "set" and any(isinstance(v, (dict, list)) for v in value):
        return "atomic"
    if mode == "map":
        defaults = shape.key_defaults
        for item in value:
            if not isinstance(item, dict):
                return "atomic"
            if any(k not in item and k not in defaults for k in shape.list_keys):
                return "atomic"
    return mode


def _element(shape: Shape, mode: str, item: Any) -> str:
    if mode == "set":
        return "v:" + _json(item)
    defaults = shape.key_defaults
    key = {k: item.get(k, defaults.get(k)) for k in shape.list_keys}
    return "k:" + _json(key)


def _index(shape: Shape, mode: str, items: Sequence[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        out.setdefault(_element(shape, mode, item), item)
    return out


def _is_map(shape: Shape, value: Any) -> bool:
    return isinstance(value, dict) and not shape.atomic_map


# --- the set of an applied configuration ----------------------------------------------------


def field_set(shape: Shape, obj: Any, path: Path = ()) -> set[Path]:
    """What applying ``obj`` claims (the apiserver's ToFieldSet)."""
    out: set[Path] = set()
    if isinstance(obj, dict):
        if shape.atomic_map:
            return {path} if path else set()
        for key, value in obj.items():
            sub = (*path, f"f:{key}")
            if value is None or value == {} or not shape.declares(key):
                out.add(sub)
            out |= field_set(shape.field(key), value, sub)
        return out
    if isinstance(obj, list):
        mode = _list_mode(shape, obj)
        if mode == "atomic":
            return {path}
        item_shape = shape.item()
        for element, item in _index(shape, mode, obj).items():
            sub = (*path, element)
            out.add(sub)
            if mode == "map":
                out |= field_set(item_shape, item, sub)
        return out
    return {path}


# --- comparing two versions ---------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Comparison:
    added: set[Path] = dataclasses.field(default_factory=set)
    modified: set[Path] = dataclasses.field(default_factory=set)
    removed: set[Path] = dataclasses.field(default_factory=set)

    def changed(self) -> set[Path]:
        return self.added | self.modified


def compare(shape: Shape, old: Any, new: Any) -> Comparison:
    """What changed from ``old`` to ``new`` (the apiserver's Compare)."""
    out = Comparison()
    _compare(shape, old, new, (), out)
    return out


def _compare(shape: Shape, old: Any, new: Any, path: Path, out: Comparison) -> None:
    container = False
    if _is_map(shape, old) or _is_map(shape, new):
        lhs = old if isinstance(old, dict) else {}
        rhs = new if isinstance(new, dict) else {}
        if (
            (lhs or rhs)
            and (old is _MISSING or isinstance(old, dict))
            and (new is _MISSING or isinstance(new, dict))
        ):
            container = True
            for key in [*lhs, *(k for k in rhs if k not in lhs)]:
                _compare(
                    shape.field(key),
                    lhs.get(key, _MISSING),
                    rhs.get(key, _MISSING),
                    (*path, f"f:{key}"),
                    out,
                )
    elif isinstance(old, list) or isinstance(new, list):
        lhs_l = old if isinstance(old, list) else []
        rhs_l = new if isinstance(new, list) else []
        mode_l = _list_mode(shape, lhs_l) if isinstance(old, list) else shape.list_type
        mode_r = _list_mode(shape, rhs_l) if isinstance(new, list) else shape.list_type
        kinds_fit = (old is _MISSING or isinstance(old, list)) and (
            new is _MISSING or isinstance(new, list)
        )
        if (lhs_l or rhs_l) and kinds_fit and mode_l == mode_r and mode_l != "atomic":
            container = True
            item_shape = shape.item()
            left, right = _index(shape, mode_l, lhs_l), _index(shape, mode_l, rhs_l)
            for element in [*left, *(e for e in right if e not in left)]:
                _compare(
                    item_shape,
                    left.get(element, _MISSING),
                    right.get(element, _MISSING),
                    (*path, element),
                    out,
                )
    if not path:
        return
    if container:
        if old is _MISSING:
            out.added.add(path)
        elif new is _MISSING:
            out.removed.add(path)
    elif old is _MISSING:
        out.added.add(path)
    elif new is _MISSING:
        out.removed.add(path)
    elif old != new:
        out.modified.add(path)


# --- merging an applied configuration --------------------------------------------------------


def merge(shape: Shape, live: Any, config: Any) -> Any:
    """``config`` merged into ``live`` as apply does (``null`` in ``config`` removes)."""
    if _is_map(shape, config) and isinstance(live, dict):
        out = dict(live)
        for key, value in config.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merge(shape.field(key), live.get(key, _MISSING), value)
        return out
    if isinstance(config, list) and isinstance(live, list):
        mode = _list_mode(shape, config)
        if mode != "atomic" and _list_mode(shape, live) == mode:
            return _merge_items(shape, mode, live, config)
    return _clean(config)


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _merge_items(shape: Shape, mode: str, live: list[Any], config: list[Any]) -> list[Any]:
    """The apiserver's interleaving: live order kept, applied items merged in place and new
    ones placed where they come in the applied list."""
    item_shape = shape.item()
    lhs = [(_element(shape, mode, i), i) for i in live]
    rhs = [(_element(shape, mode, i), i) for i in config]
    in_lhs = {e: i for e, i in reversed(lhs)}
    in_rhs = {e: i for e, i in reversed(rhs)}
    shared = [e for e, _ in rhs if e in in_lhs]
    out: list[Any] = []
    done: set[str] = set()
    li = ri = 0

    def take(element: str) -> None:
        done.add(element)
        if element in in_lhs and mode == "map":
            out.append(merge(item_shape, in_lhs[element], in_rhs[element]))
        else:
            out.append(_clean(in_rhs[element]))
        if shared and shared[0] == element:
            shared.pop(0)

    while li < len(lhs) or ri < len(rhs):
        if li < len(lhs) and ri < len(rhs):
            element = lhs[li][0]
            if element == rhs[ri][0]:
                if element not in done:
                    take(element)
                li += 1
                ri += 1
                continue
            if element in in_rhs and shared and shared[0] != element:
                li += 1
                continue
        if li < len(lhs):
            element, item = lhs[li]
            if element not in in_rhs:
                out.append(item)
                li += 1
                continue
            if element in done:
                li += 1
                continue
        if ri < len(rhs):
            element = rhs[ri][0]
            if element not in done:
                take(element)
            ri += 1
    return out


def remove(shape: Shape, obj: Any, paths: Iterable[Path]) -> Any:
    """``obj`` without the values at ``paths`` (a copy; missing paths are ignored)."""
    out = obj
    done: set[Path] = set()
    # Shortest first, skipping what lies under a removed path: removing an item's key field
    # before the item would leave the item unfindable.
    for path in sorted(paths, key=len):
        if any(path[:n] in done for n in range(1, len(path))):
            continue
        done.add(path)
        out = _remove_one(shape, out, path)
    return out


def _remove_one(shape: Shape, value: Any, path: Path) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(value, dict) and head.startswith("f:"):
        key = head[2:]
        if key not in value:
            return value
        out = dict(value)
        if rest:
            out[key] = _remove_one(shape.field(key), value[key], rest)
        else:
            del out[key]
        return out
    if isinstance(value, list):
        mode = _list_mode(shape, value)
        if mode == "atomic":
            return value
        kept = []
        for item in value:
            if _element(shape, mode, item) != head:
                kept.append(item)
            elif rest:
                kept.append(_remove_one(shape.item(), item, rest))
        return kept
    return value


# --- managers -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Writer:
    """Who writes: the manager name, Apply or Update, the object's apiVersion, subresource."""

    manager: str
    operation: str
    api_version: str
    subresource: str = ""
    force: bool = False

    @property
    def ident(self) -> tuple[str, str, str, str]:
        version = "" if self.operation == APPLY else self.api_version
        return (self.manager, self.operation, version, self.subresource)


@dataclasses.dataclass(slots=True)
class Entry:
    manager: str
    operation: str
    api_version: str
    subresource: str
    time: str | None
    fields: set[Path]

    @property
    def ident(self) -> tuple[str, str, str, str]:
        version = "" if self.operation == APPLY else self.api_version
        return (self.manager, self.operation, version, self.subresource)

    def printed(self) -> str:
        """The manager as conflicts name it: ``"kubectl" using apps/v1``."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


def decode(entries: Any) -> list[Entry]:
    """Stored managedFields; raises ``ValueError`` on a malformed one."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ValueError("managedFields must be a list")
    out = []
    for e in entries:
        if not isinstance(e, dict):
            raise ValueError("a managedFields entry must be an object")
        fields = e.get("fieldsV1")
        out.append(
            Entry(
                manager=str(e.get("manager") or ""),
                operation=str(e.get("operation") or ""),
                api_version=str(e.get("apiVersion") or ""),
                subresource=str(e.get("subresource") or ""),
                time=e.get("time") if isinstance(e.get("time"), str) else None,
                fields=decode_set(fields) if fields is not None else set(),
            )
        )
    return out


def encode(entries: Iterable[Entry]) -> list[dict[str, Any]]:
    """managedFields in the apiserver's order: operation, time, manager, apiVersion."""
    kept = [e for e in entries if e.fields]
    kept.sort(key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource))
    out = []
    for e in kept:
        doc: dict[str, Any] = {"manager": e.manager, "operation": e.operation}
        doc["apiVersion"] = e.api_version
        if e.time:
            doc["time"] = e.time
        doc["fieldsType"] = FIELDS_V1
        doc["fieldsV1"] = encode_set(e.fields)
        if e.subresource:
            doc["subresource"] = e.subresource
        out.append(doc)
    return out


def validate_manager(manager: str, options: str = "PatchOptions") -> None:
    """A 422 naming ``options`` (CreateOptions, UpdateOptions, PatchOptions) when too long."""
    if len(manager.encode()) > MAX_MANAGER_BYTES:
        raise _invalid_options("fieldManager: Too long: may not be more than 128 bytes", options)


def manager_from_user_agent(user_agent: str | None) -> str:
    """The default field manager: the User-Agent up to its first ``/``."""
    return (user_agent or "").split("/", 1)[0]


def _invalid_options(message: str, options: str = "PatchOptions") -> errors.ApiError:
    return errors.ApiError(
        statuses.failure(
            422,
            f'{options}.meta.k8s.io "" is invalid: {message}',
            details={"group": "meta.k8s.io", "kind": options},
        )
    )


def force_not_allowed() -> errors.ApiError:
    return _invalid_options("force: Forbidden: may not be specified for non-apply patch")


def _now(now: float) -> str:
    return objectmeta.timestamp(now)


def _conflicts(entries: list[Entry], writer: Writer, cmp: Comparison) -> list[Conflict]:
    """The fields other managers own that this write adds or changes."""
    changed = cmp.changed()
    out = []
    for e in entries:
        if e.ident != writer.ident and e.fields & changed:
            out.append(Conflict(e, e.fields & changed))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Conflict:
    entry: Entry
    paths: set[Path]


def _owned_changes(
    shape: Shape, old: Any, new: Any, writer: Writer, has_status: bool
) -> Comparison:
    """What changed, without the fields nobody owns or this write may not touch."""
    cmp = compare(shape, old, new)
    return Comparison(
        _filter(cmp.added, writer.subresource, has_status),
        _filter(cmp.modified, writer.subresource, has_status),
        _filter(cmp.removed, writer.subresource, has_status),
    )


def update(
    shape: Shape,
    live: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    managed: list[Entry],
    writer: Writer,
    now: float,
    *,
    has_status: bool = False,
) -> list[Entry]:
    """The managers after a non-apply write of ``new`` over ``live`` (None: a create)."""
    cmp = _owned_changes(
        shape, dict(live) if live is not None else {}, dict(new), writer, has_status
    )
    entries = [dataclasses.replace(e, fields=set(e.fields)) for e in managed]
    for e in entries:
        e.fields -= cmp.changed() | cmp.removed
    taken = cmp.changed()
    mine = next((e for e in entries if e.ident == writer.ident), None)
    if taken:
        if mine is None:
            mine = Entry(
                writer.manager, UPDATE, writer.api_version, writer.subresource, None, set()
            )
            entries.append(mine)
        mine.fields |= taken
        mine.time = _now(now)
    return _bounded([e for e in entries if e.fields])


@dataclasses.dataclass(frozen=True, slots=True)
class Applied:
    obj: dict[str, Any]
    managed: list[Entry]
    changed: bool


def apply(
    shape: Shape,
    live: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    managed: list[Entry],
    writer: Writer,
    now: float,
    *,
    has_status: bool = False,
) -> Applied:
    """Apply ``config`` over ``live`` (None: create) as ``writer``; 409 on conflicts."""
    base: dict[str, Any] = dict(live) if live is not None else {}
    applied = _filter(field_set(shape, dict(config)), writer.subresource, has_status)
    merged = merge(shape, base, dict(config))
    entries = [dataclasses.replace(e, fields=set(e.fields)) for e in managed]
    mine = next((e for e in entries if e.ident == writer.ident), None)
    last = set(mine.fields) if mine is not None else set()
    if mine is None:
        mine = Entry(writer.manager, APPLY, writer.api_version, writer.subresource, None, set())
        entries.append(mine)
    mine.fields = applied
    mine.api_version = writer.api_version
    owned: set[Path] = set()
    for e in entries:
        owned |= e.fields
    gone = {p for p in last - owned if not any(o[: len(p)] == p for o in owned)}
    merged = remove(shape, merged, gone)
    cmp = _owned_changes(shape, base, merged, writer, has_status)
    conflicts = _conflicts(entries, writer, cmp)
    if conflicts and not writer.force:
        raise conflict_error(conflicts)
    for e in entries:
        if e is not mine:
            e.fields -= cmp.changed() | cmp.removed
    changed = merged != base
    if changed or mine.time is None:
        mine.time = _now(now)
    return Applied(merged, _bounded([e for e in entries if e.fields]), changed)


def _bounded(entries: list[Entry]) -> list[Entry]:
    """At most ``MAX_UPDATE_MANAGERS`` Update entries, as the apiserver keeps them: the oldest
    merge into one ``ancient-changes`` entry per apiVersion. Apply entries each own a field
    and the object is bounded, but sharing one value is free: past ``MAX_ENTRIES`` a write
    is refused (the simulator's stand-in for etcd's object size limit)."""
    updates = sorted(
        (e for e in entries if e.operation == UPDATE), key=lambda e: (e.time or "", e.manager)
    )
    excess = len(updates) - MAX_UPDATE_MANAGERS
    if excess > 0:
        merged: dict[str, Entry] = {}
        for old in updates[: excess + 1]:
            bucket = merged.get(old.api_version)
            if bucket is None:
                merged[old.api_version] = dataclasses.replace(
                    old, manager=ANCIENT_CHANGES, subresource="", fields=set(old.fields)
                )
            else:
                bucket.fields |= old.fields
                bucket.time = old.time
        retired = {id(e) for e in updates[: excess + 1]}
        entries = [e for e in entries if id(e) not in retired] + list(merged.values())
    if len(entries) > MAX_ENTRIES:
        raise errors.ApiError(
            statuses.failure(
                422,
                f"metadata.managedFields: Too many: {len(entries)}: must have at most "
                f"{MAX_ENTRIES} entries",
                reason="Invalid",
            )
        )
    return entries


def conflict_error(conflicts: Sequence[Conflict]) -> errors.ApiError:
    """409 Conflict as the apiserver words it, one cause per conflicting field."""
    ordered = sorted(((c.entry, c.paths) for c in conflicts), key=lambda item: item[0].ident)
    pairs = [(e, p) for e, paths in ordered for p in iterate(paths)]
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {e.printed()}",
            "field": describe(p),
        }
        for e, p in pairs
    ]
    if len(pairs) == 1:
        e, p = pairs[0]
        message = f"Apply failed with 1 conflict: conflict with {e.printed()}: {describe(p)}"
    else:
        lines = []
        for e, paths in ordered:
            lines.append(f"conflicts with {e.printed()}:")
            lines.extend(f"- {describe(p)}" for p in iterate(paths))
        message = f"Apply failed with {len(pairs)} conflicts: " + "\n".join(lines)
    return errors.ApiError(
        statuses.failure(409, message, reason="Conflict", details={"causes": causes})
    )
