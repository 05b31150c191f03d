"""Decoding list pages and watch events straight into what a ``trimming.Shape`` keeps.

``json.loads`` builds every field of every object before trimming drops most of them: a page
of 500 Pods is some 25 MB of Python objects and 0.4 s of CPU, for the few hundred bytes a
Pod the controllers read. A ``Decoder`` compiles the shape into msgspec types (a Struct per
mapping of named fields, ``Any`` for what is kept whole), so the JSON parser skips the rest
in C without building it: the same page is under 1 MB of transient objects and a few
milliseconds. What it decodes is then finished exactly as ``Shape.trim_fields`` would
(strings interned, equal values shared, ``Items.where`` applied), so both paths give equal
objects (held equal by tests/unit/kubecontrol/test_kubecontrol_decoding.py).

A mapping whose unnamed keys are kept (``Fields(..., rest=...)``) is decoded whole and trimmed
in Python. A page or event the compiled types refuse (a field of a type the apiserver never
sends, ``null`` where an object belongs) is decoded the slow way (``json`` +
``Shape.trim_fields``): nothing is lost, only the speed.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from typing import Any

import msgspec

from kubecontrol import kubeapi, trimming

_UNSET = msgspec.UNSET


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """How to finish one decoded value: its spec, and for a Struct its fields
    (JSON key, attribute, plan)."""

    spec: Any
    fields: tuple[tuple[str, str, _Plan], ...] = ()
    item: _Plan | None = None
    struct: bool = False


def _compile(spec: Any, names: Iterator[int]) -> tuple[Any, _Plan]:
    """(msgspec type, plan) for ``spec``."""
    if spec is trimming.KEEP or spec is trimming.INTERN:
        return Any, _Plan(spec)
    if isinstance(spec, trimming.Shared):
        kind, inner = _compile(spec.inner, names)
        return kind, _Plan(spec, item=inner)
    if isinstance(spec, trimming.Items):
        kind, inner = _compile(spec.item, names)
        return list[kind] | None, _Plan(spec, item=inner)  # type: ignore[valid-type]
    fields = trimming.fields_of(spec)
    if fields is None:
        raise TypeError(f"not a trimming spec: {spec!r}")
    if fields.rest is not None:
        return dict[str, Any] | None, _Plan(fields)
    members: list[tuple[str, Any, Any]] = []
    plans: list[tuple[str, str, _Plan]] = []
    rename: dict[str, str] = {}
    for key, sub in fields.fields.items():
        if sub is trimming.DROP:
            continue
        attr = f"f{len(members)}"
        kind, plan = _compile(sub, names)
        members.append((attr, kind | msgspec.UnsetType, _UNSET))
        rename[attr] = key
        plans.append((trimming.intern_key(key), attr, plan))
    struct = msgspec.defstruct(f"Kept{next(names)}", members, rename=rename, kw_only=True)
    return struct | None, _Plan(fields, tuple(plans), struct=True)


_ABSENT = trimming.ABSENT


def _finish(value: Any, plan: _Plan, sharing: trimming.Sharing) -> Any:
    spec = plan.spec
    if value is _UNSET:
        return _ABSENT
    if spec is trimming.KEEP:
        return value  # decoded into objects of its own already
    if spec is trimming.INTERN:
        return trimming.interned(value, copy=False)
    if isinstance(spec, trimming.Shared):
        assert plan.item is not None
        inner = _finish(value, plan.item, sharing)
        return inner if inner is _ABSENT else sharing.share(inner, copy=False)
    if isinstance(spec, trimming.Items):
        if not isinstance(value, list):
            return _ABSENT
        assert plan.item is not None
        kept = []
        for item in value:
            done = _finish(item, plan.item, sharing)
            if done is not _ABSENT and (spec.where is None or spec.where(done)):
                kept.append(done)
        return kept or _ABSENT
    if not plan.struct:  # a mapping decoded whole
        return trimming.trim_value(value, spec, sharing)
    if value is None:
        return _ABSENT
    out = {}
    for key, attr, sub in plan.fields:
        done = _finish(getattr(value, attr), sub, sharing)
        if done is not _ABSENT:
            out[key] = done
    return out or _ABSENT


class _ListMeta(
    msgspec.Struct, kw_only=True, rename={"rv": "resourceVersion", "token": "continue"}
):
    rv: str | msgspec.UnsetType = _UNSET
    token: str | msgspec.UnsetType = _UNSET


class _Envelope(msgspec.Struct):
    type: str
    object: msgspec.Raw


class Decoder:
    """Pages and events of one resource, decoded into what ``shape`` keeps (before its
    ``keep``: the reflector applies that)."""

    def __init__(self, shape: trimming.Shape, sharing: trimming.Sharing) -> None:
        self.shape = shape
        self.sharing = sharing
        names = itertools.count()
        kind, self._plan = _compile(shape.fields, names)
        self._probe: msgspec.json.Decoder[Any] | None = None
        if shape.probe is not None:
            probe, self._probe_plan = _compile(shape.probe, names)
            self._probe = msgspec.json.Decoder(probe)
            item: Any = msgspec.Raw | None  # each item decoded twice at most: probe, then all
        else:
            item = kind
        page = msgspec.defstruct(
            "Page",
            [
                ("metadata", _ListMeta | None | msgspec.UnsetType, _UNSET),
                ("items", list[item] | None | msgspec.UnsetType, _UNSET),
            ],
            kw_only=True,
        )
        self._page = msgspec.json.Decoder(page)
        self._object = msgspec.json.Decoder(kind)
        self._envelope = msgspec.json.Decoder(_Envelope)

    def _finish(self, value: Any) -> dict[str, Any]:
        done = _finish(value, self._plan, self.sharing)
        return done if isinstance(done, dict) else {}

    def _probed(self, raw: Any) -> dict[str, Any]:
        """One item of a shape with a probe: its probe if ``keep`` refuses it, else all that
        the shape keeps (``raw``: its JSON, undecoded)."""
        assert self._probe is not None
        probed = _finish(self._probe.decode(raw), self._probe_plan, self.sharing)
        probed = probed if isinstance(probed, dict) else {}
        if not self.shape.keeps(probed):
            return probed
        done = _finish(self._object.decode(raw), self._plan, self.sharing)
        return done if isinstance(done, dict) else {}

    def page(self, raw: bytes) -> kubeapi.ObjectList:
        """One list page (its items trimmed, the list's resourceVersion, the continue token)."""
        try:
            decoded = self._page.decode(raw)
        except msgspec.ValidationError:
            return self._page_slowly(raw)
        except msgspec.DecodeError as e:
            raise kubeapi.Unavailable(f"malformed list answer: {e}") from e
        meta = getattr(decoded, "metadata", None)
        items = getattr(decoded, "items", None)
        if not isinstance(meta, _ListMeta):
            meta = _ListMeta()
        finish = self._finish if self._probe is None else self._probed_or_slowly
        return kubeapi.ObjectList(
            [finish(v) for v in (items if isinstance(items, list) else []) if v is not None],
            _text(meta.rv),
            _text(meta.token),
        )

    def _probed_or_slowly(self, raw: Any) -> dict[str, Any]:
        try:
            return self._probed(raw)
        except msgspec.ValidationError:
            plain = json.loads(bytes(raw))
            return self._trim_slowly(plain) if isinstance(plain, dict) else {}

    def _page_slowly(self, raw: bytes) -> kubeapi.ObjectList:
        doc = json.loads(raw)
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        items = doc.get("items") if isinstance(doc, dict) else None
        return kubeapi.ObjectList(
            [
                self._trim_slowly(item)
                for item in (items if isinstance(items, list) else [])
                if isinstance(item, dict)
            ],
            str(meta.get("resourceVersion") or ""),
            str(meta.get("continue") or ""),
        )

    def _trim_slowly(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.shape.probe is not None:
            probed = trimming.trim_value(obj, self.shape.probe, self.sharing)
            probed = probed if isinstance(probed, dict) else {}
            if not self.shape.keeps(probed):
                return probed
        return self.shape.trim_fields(obj, self.sharing)

    def event(self, line: bytes, path: str) -> kubeapi.WatchEvent | None:
        """One watch event line, its object trimmed; errors as ``kubeapi.parse_event``."""
        try:
            envelope = self._envelope.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return kubeapi.parse_event(line, path)  # its own error for a malformed line
        if envelope.type not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            return kubeapi.parse_event(line, path)  # ERROR (raises), or ignored
        raw = bytes(envelope.object)
        try:
            if self._probe is not None:
                if raw.strip() in (b"", b"null"):
                    raise kubeapi.Unavailable(f"watch {path}: malformed event")
                obj = self._probed(raw)
            else:
                decoded = self._object.decode(raw)
                if decoded is None:
                    raise kubeapi.Unavailable(f"watch {path}: malformed event")
                obj = self._finish(decoded)
        except msgspec.ValidationError:
            plain = json.loads(raw)
            if not isinstance(plain, dict):
                raise kubeapi.Unavailable(f"watch {path}: malformed event") from None
            obj = self._trim_slowly(plain)
        except msgspec.DecodeError as e:
            raise kubeapi.Unavailable(f"watch {path}: malformed event") from e
        return kubeapi.WatchEvent(envelope.type, obj or {})


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
