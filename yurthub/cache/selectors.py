"""Label and field selectors: parse the query strings, match objects, name the selectable fields.

Pure: plain strings and mappings in, frozen values out; no I/O, no aiohttp. Both
the offline cache (answering a list from disk) and the simulated apiserver use
this one module, so they agree on which objects a selector covers.

Grammar (as kube-apiserver's ``labels.Parse`` and ``fields.ParseSelector``):

- labels: comma-joined requirements ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
  ``k notin (a,b)``, ``k`` (exists), ``!k`` (does not exist), ``k>3``, ``k<3``.
  Keys may carry a DNS-subdomain prefix (``apps.openyurt.io/nodepool``).
  ``!=`` and ``notin`` also match objects that lack the key, as upstream does.
- fields: comma-joined ``k=v``, ``k==v``, ``k!=v``; ``\\``, ``,`` and ``=`` can be
  escaped with a backslash inside values. A missing field reads as ``""``.

Invariants: an empty selector matches everything; ``canonical()`` is the same
string for selectors that differ only in order, spacing or ``=`` vs ``==``, so it
can be part of a cache key.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "FieldSelector",
    "FieldTerm",
    "LabelSelector",
    "Operator",
    "Requirement",
    "SelectorError",
    "field_values",
    "from_label_selector",
    "parse_fields",
    "parse_labels",
    "supported_fields",
    "unsupported",
]


class SelectorError(ValueError):
    """A selector string that does not parse; the message names the offending part."""


class Operator(enum.StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = ">"
    LESS_THAN = "<"


_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE = re.compile(_NAME)
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_VALUE_RE = re.compile(f"({_NAME})?")


def _check_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(prefix)):
        raise SelectorError(
            f"invalid label key {key!r}: prefix must be a DNS subdomain of at most 253 characters"
        )
    if not name or len(name) > 63 or not _NAME_RE.fullmatch(name):
        raise SelectorError(
            f"invalid label key {key!r}: name part must be 1-63 alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )


def _check_value(key: str, value: str) -> None:
    if len(value) > 63 or not _VALUE_RE.fullmatch(value):
        raise SelectorError(
            f"invalid label value {value!r} for key {key!r}: at most 63 alphanumerics, "
            "'-', '_' or '.', starting and ending with an alphanumeric"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if op is Operator.EQUALS or op is Operator.IN:
            return value is not None and value in self.values
        if op is Operator.NOT_EQUALS or op is Operator.NOT_IN:
            return value is None or value not in self.values
        # > and < compare integers; a non-integer label simply does not match.
        if value is None:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if op is Operator.GREATER_THAN else number < bound

    def canonical(self) -> str:
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if op is Operator.IN or op is Operator.NOT_IN:
            return f"{self.key} {op.value} ({','.join(self.values)})"
        return f"{self.key}{op.value}{self.values[0]}"


@dataclasses.dataclass(frozen=True, slots=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        found = labels if labels is not None else {}
        return all(r.matches(found) for r in self.requirements)

    def empty(self) -> bool:
        return not self.requirements

    def canonical(self) -> str:
        return ",".join(r.canonical() for r in self.requirements)

    def __str__(self) -> str:
        return self.canonical()


# --- label selector lexer/parser -------------------------------------------------------------

_SPECIAL = frozenset(" \t\n\r,()=!<>")


def _lex(text: str) -> list[tuple[str, str, int]]:
    """Tokens as (kind, text, position); kind is "id" or the operator/punctuation itself."""
    tokens: list[tuple[str, str, int]] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in " \t\n\r":
            i += 1
            continue
        if c in ",()<>":
            tokens.append((c, c, i))
            i += 1
            continue
        if c == "=":
            if text.startswith("==", i):
                tokens.append(("=", "==", i))
                i += 2
            else:
                tokens.append(("=", "=", i))
                i += 1
            continue
        if c == "!":
            if text.startswith("!=", i):
                tokens.append(("!=", "!=", i))
                i += 2
            else:
                tokens.append(("!", "!", i))
                i += 1
            continue
        start = i
        while i < n and text[i] not in _SPECIAL:
            i += 1
        word = text[start:i]
        kind = word if word in ("in", "notin") else "id"
        tokens.append((kind, word, start))
    return tokens


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _lex(text)
        self.pos = 0

    def _peek(self) -> tuple[str, str, int]:
        if self.pos < len(self.tokens):
            return self.tokens[self.pos]
        return ("eof", "", len(self.text))

    def _next(self) -> tuple[str, str, int]:
        tok = self._peek()
        self.pos += 1
        return tok

    def _fail(self, why: str, at: int) -> SelectorError:
        return SelectorError(f"invalid label selector {self.text!r}: {why} at position {at}")

    def parse(self) -> LabelSelector:
        requirements: list[Requirement] = []
        if self._peek()[0] == "eof":
            return LabelSelector()
        while True:
            requirements.append(self._requirement())
            kind, word, at = self._next()
            if kind == "eof":
                break
            if kind != ",":
                raise self._fail(f"expected ',' or end of selector, found {word!r}", at)
        requirements.sort(key=lambda r: (r.key, r.operator.value, r.values))
        return LabelSelector(tuple(requirements))

    def _requirement(self) -> Requirement:
        kind, word, at = self._next()
        if kind == "!":
            kind, word, at = self._next()
            if kind != "id":
                raise self._fail(f"expected a label key after '!', found {word!r}", at)
            _check_key(word)
            return Requirement(word, Operator.DOES_NOT_EXIST)
        if kind != "id":
            raise self._fail(f"expected a label key, found {word or 'end of selector'!r}", at)
        key = word
        _check_key(key)
        kind, word, at = self._peek()
        if kind in ("eof", ","):
            return Requirement(key, Operator.EXISTS)
        self.pos += 1
        if kind in ("=", "!="):
            value = self._single_value()
            _check_value(key, value)
            op = Operator.EQUALS if kind == "=" else Operator.NOT_EQUALS
            return Requirement(key, op, (value,))
        if kind in ("in", "notin"):
            values = self._value_set(kind)
            for v in values:
                _check_value(key, v)
            op = Operator.IN if kind == "in" else Operator.NOT_IN
            return Requirement(key, op, tuple(sorted(set(values))))
        if kind in ("<", ">"):
            vkind, value, vat = self._next()
            if vkind != "id":
                raise self._fail(f"expected an integer after {kind!r}", vat)
            try:
                int(value)
            except ValueError:
                raise self._fail(f"{value!r} is not an integer", vat) from None
            op = Operator.GREATER_THAN if kind == ">" else Operator.LESS_THAN
            return Requirement(key, op, (value,))
        raise self._fail(
            f"expected one of '=', '==', '!=', 'in', 'notin', '<', '>' after key {key!r}, "
            f"found {word!r}",
            at,
        )

    def _single_value(self) -> str:
        kind, word, _at = self._peek()
        if kind in ("eof", ","):
            return ""
        if kind == "id":
            self.pos += 1
            return word
        # "in"/"notin" are ordinary values on the right-hand side.
        if kind in ("in", "notin"):
            self.pos += 1
            return word
        raise self._fail(f"expected a label value, found {word!r}", _at)

    def _value_set(self, op: str) -> list[str]:
        kind, word, at = self._next()
        if kind != "(":
            raise self._fail(f"expected '(' after {op!r}, found {word or 'end of selector'!r}", at)
        values: list[str] = []
        expect_value = True
        while True:
            kind, word, at = self._next()
            if kind == ")":
                if expect_value and values:
                    values.append("")
                break
            if kind == "eof":
                raise self._fail(f"missing ')' to close the {op!r} value list", at)
            if kind == ",":
                if expect_value:
                    values.append("")
                expect_value = True
                continue
            if kind in ("id", "in", "notin") and expect_value:
                values.append(word)
                expect_value = False
                continue
            raise self._fail(f"unexpected {word!r} in the {op!r} value list", at)
        if not values:
            raise self._fail(f"the {op!r} value list must not be empty", at)
        return values


def parse_labels(text: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query value; ``None`` or blank gives the empty selector."""
    if text is None or not text.strip():
        return LabelSelector()
    return _LabelParser(text).parse()


def from_label_selector(spec: Mapping[str, Any] | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` object (matchLabels/matchExpressions) as a LabelSelector."""
    if not spec:
        return LabelSelector()
    requirements: list[Requirement] = []
    for key, value in (spec.get("matchLabels") or {}).items():
        _check_key(str(key))
        _check_value(str(key), str(value))
        requirements.append(Requirement(str(key), Operator.EQUALS, (str(value),)))
    operators = {
        "In": Operator.IN,
        "NotIn": Operator.NOT_IN,
        "Exists": Operator.EXISTS,
        "DoesNotExist": Operator.DOES_NOT_EXIST,
    }
    for expr in spec.get("matchExpressions") or []:
        key = str(expr.get("key", ""))
        _check_key(key)
        op = operators.get(str(expr.get("operator")))
        if op is None:
            raise SelectorError(f"invalid matchExpressions operator {expr.get('operator')!r}")
        values = tuple(sorted(str(v) for v in expr.get("values") or ()))
        if op in (Operator.IN, Operator.NOT_IN) and not values:
            raise SelectorError(f"matchExpressions {op.value!r} on {key!r} needs values")
        requirements.append(Requirement(key, op, values))
    requirements.sort(key=lambda r: (r.key, r.operator.value, r.values))
    return LabelSelector(tuple(requirements))


# --- field selectors -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class FieldTerm:
    field: str
    operator: Operator  # EQUALS or NOT_EQUALS only
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        found = fields.get(self.field, "")
        if self.operator is Operator.EQUALS:
            return found == self.value
        return found != self.value

    def canonical(self) -> str:
        return f"{self.field}{self.operator.value}{_escape_field(self.value)}"


def _escape_field(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(t.matches(fields) for t in self.terms)

    def empty(self) -> bool:
        return not self.terms

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(t.field for t in self.terms)

    def requires(self, field: str) -> str | None:
        """The value an equality term pins ``field`` to, if any."""
        for t in self.terms:
            if t.field == field and t.operator is Operator.EQUALS:
                return t.value
        return None

    @property
    def name(self) -> str | None:
        return self.requires("metadata.name")

    @property
    def namespace(self) -> str | None:
        return self.requires("metadata.namespace")

    def canonical(self) -> str:
        return ",".join(t.canonical() for t in self.terms)

    def __str__(self) -> str:
        return self.canonical()


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape_field(text: str, whole: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "\\,=":
                raise SelectorError(
                    f"invalid field selector {whole!r}: invalid escape sequence in {text!r}"
                )
            out.append(text[i + 1])
            i += 2
            continue
        if c in ",=":
            raise SelectorError(
                f"invalid field selector {whole!r}: unescaped {c!r} in value {text!r}"
            )
        out.append(c)
        i += 1
    return "".join(out)


def _split_term(term: str) -> tuple[str, Operator, str] | None:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for token, op in (("!=", Operator.NOT_EQUALS), ("==", Operator.EQUALS)):
            if term.startswith(token, i):
                return term[:i], op, term[i + 2 :]
        if term[i] == "=":
            return term[:i], Operator.EQUALS, term[i + 1 :]
        i += 1
    return None


def parse_fields(text: str | None) -> FieldSelector:
    """Parse a ``fieldSelector`` query value; ``None`` or blank gives the empty selector."""
    if text is None or not text.strip():
        return FieldSelector()
    terms: list[FieldTerm] = []
    for raw in _split_unescaped(text, ","):
        part = raw.strip()
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(
                f"invalid field selector {text!r}: {part!r} has no '=', '==' or '!='"
            )
        field, op, value = split
        field = field.strip()
        if not field:
            raise SelectorError(f"invalid field selector {text!r}: {part!r} names no field")
        terms.append(FieldTerm(field, op, _unescape_field(value.strip(), text)))
    terms.sort(key=lambda t: (t.field, t.operator.value, t.value))
    return FieldSelector(tuple(terms))


# --- selectable fields per kind --------------------------------------------------------------


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for p in path:
        # ``type is dict`` first: the ABC check costs ~1 us, run for every field of every object.
        if type(cur) is not dict and not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _pod_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    return {
        "spec.nodeName": _text(_get(obj, "spec", "nodeName")),
        "spec.restartPolicy": _text(_get(obj, "spec", "restartPolicy")),
        "spec.schedulerName": _text(_get(obj, "spec", "schedulerName")),
        "spec.serviceAccountName": _text(_get(obj, "spec", "serviceAccountName")),
        "spec.hostNetwork": _text(bool(_get(obj, "spec", "hostNetwork"))),
        "status.phase": _text(_get(obj, "status", "phase")),
        "status.podIP": _text(_get(obj, "status", "podIP")),
        "status.nominatedNodeName": _text(_get(obj, "status", "nominatedNodeName")),
    }


def _event_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    # core/v1 names the object "involvedObject"; events.k8s.io/v1 calls it "regarding".
    involved = _get(obj, "involvedObject") or _get(obj, "regarding") or {}
    source = _get(obj, "source", "component") or _get(obj, "reportingController")
    out = {
        f"involvedObject.{k}": _text(_get(involved, k))
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    out["reason"] = _text(_get(obj, "reason"))
    out["reportingComponent"] = _text(_get(obj, "reportingComponent"))
    out["source"] = _text(source)
    out["type"] = _text(_get(obj, "type"))
    return out


_KIND_FIELDS: dict[str, Callable[[Mapping[str, Any]], dict[str, str]]] = {
    "pods": _pod_fields,
    "events": _event_fields,
    "secrets": lambda o: {"type": _text(_get(o, "type"))},
    "nodes": lambda o: {"spec.unschedulable": _text(bool(_get(o, "spec", "unschedulable")))},
    "namespaces": lambda o: {"status.phase": _text(_get(o, "status", "phase"))},
    "services": lambda o: {
        "spec.clusterIP": _text(_get(o, "spec", "clusterIP")),
        "spec.type": _text(_get(o, "spec", "type")),
    },
    "jobs": lambda o: {"status.successful": _text(_get(o, "status", "successful"))},
    "replicasets": lambda o: {"status.replicas": _text(_get(o, "status", "replicas"))},
    "certificatesigningrequests": lambda o: {
        "spec.signerName": _text(_get(o, "spec", "signerName"))
    },
}

_EMPTY_OBJECT: dict[str, Any] = {}


def field_values(resource: str, obj: Mapping[str, Any]) -> dict[str, str]:
    """The field-selector fields of ``obj`` (a ``resource`` such as "pods"), as strings.

    ``metadata.name`` and ``metadata.namespace`` are always present; cluster-scoped
    objects have an empty namespace.
    """
    meta = obj.get("metadata") or {}
    out = {
        "metadata.name": _text(meta.get("name")),
        "metadata.namespace": _text(meta.get("namespace")),
    }
    extra = _KIND_FIELDS.get(resource)
    if extra is not None:
        out.update(extra(obj))
    return out


def supported_fields(resource: str) -> frozenset[str]:
    """Field names a selector on ``resource`` may use; anything else is a 400 upstream."""
    return frozenset(field_values(resource, _EMPTY_OBJECT))


def unsupported(resource: str, selector: FieldSelector) -> Iterable[str]:
    """Fields of ``selector`` that ``resource`` cannot be selected by, sorted."""
    return sorted(selector.fields - supported_fields(resource))


Paths = dict[str, Any]
"""Nested JSON field names (``kubeproto.converting.Paths``): None keeps the whole field."""

_WHOLE_FIELDS: dict[str, tuple[str, ...]] = {
    # ``_event_fields`` falls back to events.k8s.io/v1's names, and reads the whole source.
    "events": ("involvedObject", "regarding", "source", "reportingController"),
}


@functools.lru_cache(maxsize=512)
def index_paths(resource: str) -> Paths:
    """The JSON fields an index entry of ``resource`` is made from (identity, labels and the
    selectable fields), as nested names (None: the whole field): what the cache reads from a
    protobuf object instead of converting all of it. ``field_values`` and
    ``entries.entry_from_object`` give the same answers on an object holding only these.
    Callers must not change the returned dict (it is shared)."""
    paths: Paths = {
        "metadata": {"name": None, "namespace": None, "resourceVersion": None, "labels": None}
    }
    wanted = [f.split(".") for f in supported_fields(resource) if not f.startswith("metadata.")]
    wanted += [[name] for name in _WHOLE_FIELDS.get(resource, ())]
    for path in wanted:
        node = paths
        for part in path[:-1]:
            inner: Paths | None = node.get(part, {})
            if inner is None:
                break  # the whole of it is kept already
            node = node.setdefault(part, inner)
        else:
            node[path[-1]] = None
    return paths
