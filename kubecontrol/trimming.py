"""Keeping only what the controllers read of an object, at ingest (pure, apart from a bounded
memo the caller owns).

A reflector's store holds every object its list+watch matches for as long as the process runs:
at 50,000 Pods, a whole Pod (containers, env, volumes, status) costs some 40 KB of Python
objects, where the autonomy controller reads a name, a node name, two tolerations and two
annotations. A ``Shape`` names what a reflector keeps of every listed and watched object
before it stores or hands it on (``Shape.trim``, or ``decoding`` straight from the JSON):

* ``Fields({...}, rest=None)``: a mapping keeping only the listed keys, each by its own spec
  (``rest``: the spec of every other key; None drops them). A plain dict in a shape is read as
  ``Fields`` of it.
* ``KEEP``: the value as it came, in objects of its own (strings copied, containers rebuilt:
  nothing kept pins the decoded page in memory). ``DROP``: not kept (in ``Fields`` beside
  ``rest``).
* ``INTERN``: strings through ``sys.intern`` (one object per distinct string while any holder
  lives: namespaces, node names, label keys and values repeat across thousands of objects);
  containers are rebuilt with their strings interned.
* ``Items(spec, where=...)``: a list whose items are trimmed by ``spec``; ``where`` keeps only
  the (trimmed) items it accepts (a node's ``Ready`` condition, say).
* ``Shared(spec)``: trimmed by ``spec``, then one object for every equal value (``Sharing``,
  a memo bounded in entries): the two default tolerations of 50,000 pods, or their status
  ``{"phase": "Running"}``, are one list and one dict. For values that repeat; a value that is
  unique per object only costs a memo entry.

An empty mapping or list that trimming leaves (annotations of which none is kept) is left out,
so consumers read fields with ``.get(...) or {}`` as they already must. ``Shape.keep`` may refuse
whole objects, judged on what the shape keeps of them (the reflector then holds nothing of
them). ``kubecontrol.decoding`` decodes JSON straight into a shape; this module is the
reference it is held to, and its way for what that cannot decode.

Danger: a shared value is one object for many stored objects: consumers must treat stored
objects as read-only (copy before changing, as client-go asks of its caches). Every
controller already builds new bodies for its writes.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

JSONObject = dict[str, Any]


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


KEEP = _Marker("KEEP")
INTERN = _Marker("INTERN")
DROP = _Marker("DROP")


@dataclasses.dataclass(frozen=True, slots=True)
class Fields:
    fields: Mapping[str, Spec]
    rest: Spec | None = None
    """The spec of keys not in ``fields`` (None: dropped)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Items:
    item: Spec
    where: Callable[[Any], bool] | None = None
    """Items it refuses are left out (it sees each item as ``item`` trimmed it)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Shared:
    inner: Spec = KEEP


Spec = _Marker | Fields | Items | Shared | Mapping[str, Any]

ABSENT: Any = _Marker("ABSENT")
"""What trimming returns for a value of which nothing is kept."""
_ABSENT = ABSENT
_IDENTITY = ("name", "namespace", "resourceVersion")


class Sharing:
    """The memo of ``Shared`` values: frozen value -> the one object stored for it. Bounded:
    once it holds ``max_entries`` values it starts over (objects already trimmed keep theirs;
    later equal values get a new shared object)."""

    def __init__(self, max_entries: int = 16384) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self.max_entries = max_entries
        self._memo: dict[Any, Any] = {}

    def __len__(self) -> int:
        return len(self._memo)

    def share(self, value: Any, *, copy: bool = True) -> Any:
        """The one object for ``value`` (built of its own strings when ``copy``: see
        ``_own``; the decoder's values are its own already)."""
        if isinstance(value, str):
            return _intern(value) if copy else sys.intern(value)
        if not isinstance(value, dict | list):
            return value
        try:
            # JSON text is the value's identity: {} and [] apart, true and 1 apart, keys sorted.
            frozen = _JSON.encode(value)
        except TypeError:  # not JSON data: kept as it is
            return value
        found = self._memo.get(frozen, _ABSENT)
        if found is not _ABSENT:
            return found
        if len(self._memo) >= self.max_entries:
            self._memo.clear()
        own = _interned(value) if copy else _interned_in_place(value)
        self._memo[frozen] = own
        return own


_JSON = msgspec.json.Encoder(order="deterministic")


def _copy(text: str) -> str:
    """A new string object equal to ``text`` (see ``_own``)."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")


def _intern(text: str) -> str:
    return sys.intern(_copy(text))


def intern_key(key: str) -> str:
    """The one object for a mapping key (a decoded document has its own per document)."""
    return _intern(key)


def _own(value: Any) -> Any:
    """``value`` in objects of our own: strings copied, containers rebuilt.

    Why: a decoded list page is thousands of small objects side by side in the allocator's
    arenas; if the few strings kept of each object were the decoded ones, nearly every arena
    would keep a live object and none could be returned when the page is dropped: the process
    would hold a page's worth of memory (or more) for ever. Kept values made after decoding
    sit together instead."""
    if isinstance(value, str):
        return _copy(value)
    if isinstance(value, dict):
        return {_intern(k) if isinstance(k, str) else k: _own(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_own(v) for v in value]
    return value


def interned(value: Any, *, copy: bool = True) -> Any:
    """``value`` with every string (keys too) interned, containers rebuilt; strings are copied
    first when ``copy`` (see ``_own``)."""
    return _interned(value) if copy else _interned_in_place(value)


def _interned_in_place(value: Any) -> Any:
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {
            sys.intern(k) if isinstance(k, str) else k: _interned_in_place(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_interned_in_place(v) for v in value]
    return value


def _interned(value: Any) -> Any:
    if isinstance(value, str):
        return _intern(value)
    if isinstance(value, dict):
        return {_intern(k) if isinstance(k, str) else k: _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value


def fields_of(spec: Spec) -> Fields | None:
    """``spec`` as ``Fields`` (a plain mapping is one), or None when it is no mapping spec."""
    return _fields_of(spec)


def _fields_of(spec: Spec) -> Fields | None:
    if isinstance(spec, Fields):
        return spec
    if isinstance(spec, Mapping):
        return Fields(spec)
    return None


def trim_value(value: Any, spec: Spec, sharing: Sharing) -> Any:
    """``value`` trimmed by ``spec``; ``ABSENT`` when nothing of it is kept."""
    return _trim(value, spec, sharing)


def _trim(value: Any, spec: Spec, sharing: Sharing) -> Any:
    if spec is KEEP:
        return _own(value)
    if spec is DROP:
        return _ABSENT
    if spec is INTERN:
        return _interned(value)
    if isinstance(spec, Shared):
        inner = _trim(value, spec.inner, sharing)
        return inner if inner is _ABSENT else sharing.share(inner)
    if isinstance(spec, Items):
        if not isinstance(value, list):
            return _ABSENT
        kept = []
        for item in value:
            trimmed = _trim(item, spec.item, sharing)
            if trimmed is not _ABSENT and (spec.where is None or spec.where(trimmed)):
                kept.append(trimmed)
        return kept or _ABSENT
    fields = _fields_of(spec)
    if fields is None:
        raise TypeError(f"not a trimming spec: {spec!r}")
    if not isinstance(value, dict):
        return _ABSENT
    out: JSONObject = {}
    for key, item in value.items():
        sub = fields.fields.get(key, fields.rest)
        if sub is None:
            continue
        trimmed = _trim(item, sub, sharing)
        if trimmed is not _ABSENT:
            # One key object for all stored objects (a decoded document has its own).
            out[_intern(key) if type(key) is str else key] = trimmed
    return out or _ABSENT


@dataclasses.dataclass(frozen=True, slots=True)
class Shape:
    """What a reflector keeps of each object: ``fields`` (the root mapping's spec) of the
    objects ``keep`` accepts (None: all).

    ``probe``: the few fields ``keep`` reads, when the shape keeps much of few objects (the
    ``yurtstaticset`` controller's mirror Pods among all Pods). An object is then first
    trimmed (decoded) to the probe, ``keep`` judges that, and only a kept object is trimmed
    (decoded) by ``fields``; a refused one is handed on as its probe (its identity, for the
    reflector to forget it). ``keep`` must read nothing the probe does not keep."""

    fields: Mapping[str, Any] | Fields
    keep: Callable[[JSONObject], bool] | None = None
    name: str = ""
    """For log lines and metrics (``pods:autonomy``)."""
    probe: Mapping[str, Any] | Fields | None = None

    def __post_init__(self) -> None:
        _check_identity(self.fields)
        if self.probe is not None:
            _check_identity(self.probe)
            if self.keep is None:
                raise ValueError("a probe is what keep reads: give keep too")

    def trim_fields(self, obj: JSONObject, sharing: Sharing) -> JSONObject:
        """The kept part of ``obj`` (``keep`` not asked)."""
        trimmed = _trim(obj, self.fields, sharing)
        return trimmed if isinstance(trimmed, dict) else {}

    def keeps(self, trimmed: JSONObject) -> bool:
        """Whether a reflector holds the object ``trimmed`` is what this shape kept of (or
        its probe)."""
        return self.keep is None or self.keep(trimmed)

    def trim(self, obj: JSONObject, sharing: Sharing) -> JSONObject | None:
        """The kept part of ``obj``; None when ``keep`` refuses it."""
        if self.probe is not None:
            probed = _trim(obj, self.probe, sharing)
            if not self.keeps(probed if isinstance(probed, dict) else {}):
                return None
        trimmed = self.trim_fields(obj, sharing)
        return trimmed if self.keeps(trimmed) else None


def _check_identity(fields: Mapping[str, Any] | Fields) -> None:
    root = _fields_of(fields)
    if root is None:
        raise TypeError("a shape's root is a mapping of fields")
    meta = root.fields.get("metadata", root.rest)
    meta_fields = _fields_of(meta) if meta is not None else None
    if meta is not KEEP and meta_fields is None:
        raise ValueError("a shape keeps metadata (name, namespace, resourceVersion)")
    if meta_fields is not None and meta_fields.rest is not KEEP:
        missing = [k for k in _IDENTITY if k not in meta_fields.fields]
        if missing or any(meta_fields.fields[k] is DROP for k in _IDENTITY):
            raise ValueError(f"a shape keeps metadata {', '.join(_IDENTITY)}")


WITHOUT_MANAGED_FIELDS = Shape(
    Fields({"metadata": Fields({"managedFields": DROP}, rest=KEEP)}, rest=KEEP),
    name="without-managedFields",
)
"""Everything but ``metadata.managedFields`` (server-side apply's bookkeeping, which no
controller reads; often the largest part of a small object). A PUT of such an object keeps
the apiserver's managedFields: an update that omits them leaves them as they are."""
