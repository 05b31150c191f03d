"""Cache keys: which logical key an object, a list or a discovery document is stored under.

PURE: strings in, strings out. No I/O, no aiohttp.

Key scheme (YurtHub's, so operators recognise it; reference §1.4):

- object:  ``<component>/<resource>.<version>.<group>/<namespace>/<name>``; group ``core`` for
  the empty group; cluster-scoped objects and every ``namespaces`` object have no namespace level.
  PartialObjectMetadata answers live under their own component
  ``<component>/partialobjectmetadatas.<v>.meta.k8s.io/...`` so they never mix with full objects.
- list record: the object prefix, the namespace level when the list was namespaced, then
  ``?`` and the selector as a query string, e.g.
  ``kubelet/pods.v1.core?fieldSelector=spec.nodeName%3Dn1``.
  One record per (component, resource, namespace, selector): lists with different selectors
  coexist (YurtHub refuses them, issues #1963 / #1400).
- non-resource document (``/version``, discovery): the URL path itself, starting with ``/``,
  plus ``;<profile>`` for a non-default representation (aggregated discovery). A component is the
  User-Agent cut at the first ``/`` so it can never start with ``/``: the two spaces never meet.

Invariants: every segment is escaped (``%`` ``/`` ``?`` ``;`` and control characters become
``%XX``), so a key always has exactly the segments its shape says, names such as ``a/b``,
``..``, ``%2F`` or ``ü`` stay exact and distinct, and ``parse_object_key(str(k)) == k``. Keys
are SQLite strings, never file paths, so nothing here can escape the cache directory.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import urllib.parse

CORE_GROUP = "core"
PARTIAL_RESOURCE = "partialobjectmetadatas"
META_GROUP = "meta.k8s.io"

# Characters that would change a key's shape, plus what an operator's terminal should not see.
_RESERVED = frozenset("%/?;")
_RESERVED_RE = re.compile(r"[%/?;]")


class BadKey(ValueError):
    """A string that is not a key of the expected shape (CLI input, corrupt entries)."""


def escape(segment: str) -> str:
    """One key segment with reserved, control and unencodable characters as ``%XX``."""
    # Hot path (every key of every offline list): a C-level check for the common case.
    if segment.isascii() and segment.isprintable() and _RESERVED_RE.search(segment) is None:
        return segment
    out: list[str] = []
    for ch in segment:
        code = ord(ch)
        if ch in _RESERVED or code < 0x20 or code == 0x7F:
            out.append(f"%{code:02X}")
        elif 0xD800 <= code <= 0xDFFF:
            # A lone surrogate (undecodable URL bytes) cannot be stored as UTF-8 text.
            out.append(f"%u{code:04X}")
        else:
            out.append(ch)
    return "".join(out)


def unescape(segment: str) -> str:
    if "%" not in segment:
        return segment
    out: list[str] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "%" and segment.startswith("%u", i) and len(segment) >= i + 6:
            out.append(chr(int(segment[i + 2 : i + 6], 16)))
            i += 6
        elif ch == "%" and len(segment) >= i + 3:
            try:
                out.append(chr(int(segment[i + 1 : i + 3], 16)))
            except ValueError as e:
                raise BadKey(f"bad escape in key segment {segment!r}") from e
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Scope:
    """One resource type (GVR) as one component sees it."""

    component: str
    resource: str
    version: str
    group: str = ""
    """API group; empty for the core group (rendered ``core``)."""
    partial: str = ""
    """``v1``/``v1beta1`` for PartialObjectMetadata answers, else empty."""
    text: str = dataclasses.field(init=False, repr=False, compare=False, hash=False)
    """The rendered prefix, computed once (every key of every offline list starts with it)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", self._render())

    @property
    def namespaced_keys(self) -> bool:
        """False for resources whose keys never carry a namespace level."""
        return self.resource != "namespaces"

    def prefix(self) -> str:
        return self.text

    def _render(self) -> str:
        group = self.group or CORE_GROUP
        gvr = f"{escape(self.resource)}.{escape(self.version)}.{escape(group)}"
        if self.partial:
            return f"{escape(self.component)}/{PARTIAL_RESOURCE}.{self.partial}.{META_GROUP}/{gvr}"
        return f"{escape(self.component)}/{gvr}"

    def describe(self) -> str:
        group = f".{self.group}" if self.group else ""
        return f"{self.resource}{group}"


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectKey:
    scope: Scope
    namespace: str
    """Empty for cluster-scoped objects (and always for ``namespaces``)."""
    name: str

    def __str__(self) -> str:
        if self.namespace:
            return f"{self.scope.text}/{escape(self.namespace)}/{escape(self.name)}"
        return f"{self.scope.text}/{escape(self.name)}"


def object_key(scope: Scope, namespace: str, name: str) -> ObjectKey:
    """The key of one object; ``namespaces`` objects never get a namespace level."""
    return ObjectKey(scope, namespace if scope.namespaced_keys else "", name)


@dataclasses.dataclass(frozen=True, slots=True)
class ListKey:
    """What one list (and the watch that continues it) covers."""

    scope: Scope
    namespace: str
    """Empty for an all-namespaces (or cluster-scoped) list."""
    label_selector: str = ""
    """Canonical label selector (``selectors.LabelSelector.canonical()``)."""
    field_selector: str = ""
    """Canonical field selector."""

    @property
    def selected(self) -> bool:
        return bool(self.label_selector or self.field_selector)

    def covers_namespace(self, namespace: str) -> bool:
        return not self.namespace or self.namespace == namespace

    def __str__(self) -> str:
        return _list_text(self)

    def _render(self) -> str:
        base = self.scope.prefix()
        if self.namespace and self.scope.namespaced_keys:
            base = f"{base}/{escape(self.namespace)}"
        query = []
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        return f"{base}?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


# Lists are few and rendered for every object write: remember their strings.
@functools.lru_cache(maxsize=4096)
def _list_text(list_key: ListKey) -> str:
    return list_key._render()


def list_key(scope: Scope, namespace: str, label_selector: str, field_selector: str) -> ListKey:
    return ListKey(
        scope, namespace if scope.namespaced_keys else "", label_selector, field_selector
    )


def nonresource_key(path: str, profile: str = "") -> str:
    """A discovery document or ``/version``; ``profile`` names a non-default representation."""
    if not path.startswith("/"):
        raise BadKey(f"non-resource path {path!r} does not start with '/'")
    base = "/" + "/".join(escape(p) for p in path.strip("/").split("/") if p)
    return f"{base};{escape(profile)}" if profile else base


def is_nonresource_key(key: str) -> bool:
    return key.startswith("/")


def is_list_key(key: str) -> bool:
    return not key.startswith("/") and "?" in key


def _parse_gvr(text: str) -> tuple[str, str, str]:
    resource, dot1, rest = text.partition(".")
    version, dot2, group = rest.partition(".")
    if not (dot1 and dot2 and resource and version and group):
        raise BadKey(f"{text!r} is not <resource>.<version>.<group>")
    group = unescape(group)
    return unescape(resource), unescape(version), "" if group == CORE_GROUP else group


def parse_scope_prefix(segments: list[str]) -> tuple[Scope, list[str]]:
    """Split the scope off a key's segments; returns (scope, remaining segments)."""
    if len(segments) < 2:
        raise BadKey("a key has at least a component and a resource segment")
    component = unescape(segments[0])
    partial = ""
    rest = segments[1:]
    if rest[0].startswith(f"{PARTIAL_RESOURCE}.") and len(rest) >= 2:
        _, partial, _ = _parse_gvr(rest[0])
        rest = rest[1:]
    resource, version, group = _parse_gvr(rest[0])
    return Scope(component, resource, version, group, partial), rest[1:]


def parse_object_key(key: str) -> ObjectKey:
    """The inverse of ``str(ObjectKey)``; raises ``BadKey`` for anything else."""
    if is_nonresource_key(key) or "?" in key:
        raise BadKey(f"{key!r} is not an object key")
    scope, rest = parse_scope_prefix(key.split("/"))
    if len(rest) == 1:
        return ObjectKey(scope, "", unescape(rest[0]))
    if len(rest) == 2 and scope.namespaced_keys:
        return ObjectKey(scope, unescape(rest[0]), unescape(rest[1]))
    raise BadKey(f"{key!r} has {len(rest)} segments after the resource")


@functools.lru_cache(maxsize=4096)
def parse_list_key(key: str) -> ListKey:
    """The inverse of ``str(ListKey)`` (memoised: owners are parsed per object write)."""
    base, sep, query = key.partition("?")
    if not sep or is_nonresource_key(key):
        raise BadKey(f"{key!r} is not a list key")
    scope, rest = parse_scope_prefix(base.split("/"))
    if len(rest) > 1:
        raise BadKey(f"{key!r} has too many segments for a list key")
    params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    return ListKey(
        scope,
        unescape(rest[0]) if rest else "",
        params.get("labelSelector", ""),
        params.get("fieldSelector", ""),
    )
