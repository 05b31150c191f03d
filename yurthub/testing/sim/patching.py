"""Patch application: JSON merge patch, strategic merge patch, JSON patch, and the sim's apply.

Pure functions over plain JSON values; the input object is never mutated.

- ``merge_patch``: RFC 7386 (objects merge, ``null`` deletes, lists replace).
- ``strategic_merge_patch``: what kubectl sends for built-in kinds. Lists that
  upstream marks ``patchStrategy=merge`` merge element-wise by their merge key
  (containers/env/volumes by ``name``, container ports by ``containerPort``,
  service ports by ``port``, volumeMounts by ``mountPath``, conditions and node
  addresses by ``type``, ownerReferences by ``uid``, finalizers as a set).
  Directives: ``$patch: replace|delete|merge`` on maps and list elements,
  ``$setElementOrder/<list>``, ``$deleteFromPrimitiveList/<list>``,
  ``$retainKeys`` (honoured: keys not listed are cleared).
- ``json_patch``: RFC 6902 (add, remove, replace, move, copy, test).

Server-side apply (merging, field ownership, conflicts) is ``fieldmanaging``; it reads
the merge keys here (``merge_key``, ``is_primitive_set``).

Errors are ``ApiError`` 422 (a patch that cannot apply) or 400 (not a patch).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from yurthub import statuses
from yurthub.testing.sim import errors

Path = tuple[str, ...]

# --- merge keys ------------------------------------------------------------------------------

_CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})
_BY_NAME = frozenset(
    {
        *_CONTAINER_LISTS,
        "env",
        "volumes",
        "imagePullSecrets",
        "resourceClaims",
        "secrets",
    }
)
_BY_TYPE = frozenset({"conditions", "addresses"})
_BY_IP = frozenset({"hostAliases", "podIPs", "hostIPs"})
_PRIMITIVE_SETS = frozenset({"finalizers"})


def merge_key(kind: str, path: Path) -> str | None:
    """The patchMergeKey of the list at ``path`` in a ``kind`` object, or None (atomic list)."""
    if not path:
        return None
    field = path[-1]
    parent = path[-2] if len(path) > 1 else ""
    if field == "ports":
        if parent in _CONTAINER_LISTS:
            return "containerPort"
        if kind == "Service" and path == ("spec", "ports"):
            return "port"
        return None
    if field in _BY_NAME:
        return "name"
    if field in _BY_TYPE:
        return "type"
    if field in _BY_IP:
        return "ip"
    if field == "volumeMounts":
        return "mountPath"
    if field == "volumeDevices":
        return "devicePath"
    if field == "topologySpreadConstraints":
        return "topologyKey"
    if field == "ownerReferences" and parent == "metadata":
        return "uid"
    return None


def is_primitive_set(path: Path) -> bool:
    return bool(path) and path[-1] in _PRIMITIVE_SETS


# --- helpers ---------------------------------------------------------------------------------


def _invalid(message: str) -> errors.ApiError:
    return errors.ApiError(statuses.failure(422, message, reason="Invalid"))


# --- RFC 7386 --------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# --- strategic merge patch -------------------------------------------------------------------

KeyLookup = Callable[[Path], str | None]


def strategic_merge_patch(kind: str, target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        raise errors.bad_request("a strategic merge patch must be a JSON object")
    return _smp_map(
        lambda p: merge_key(kind, p), target if isinstance(target, dict) else {}, patch, ()
    )


def _smp_map(keys: KeyLookup, target: dict[str, Any], patch: dict[str, Any], path: Path) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    if directive not in (None, "merge"):
        raise _invalid(f"unknown patch directive {directive!r} at {'.'.join(path) or '<root>'}")
    out = dict(target)
    retain = patch.get("$retainKeys")
    orders: dict[str, list[Any]] = {}
    deletions: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$setElementOrder/"):
            orders[key.partition("/")[2]] = value if isinstance(value, list) else []
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            deletions[key.partition("/")[2]] = value if isinstance(value, list) else []
            continue
        if value is None:
            out.pop(key, None)
            continue
        sub = (*path, key)
        current = out.get(key)
        if isinstance(value, dict):
            merged = _smp_map(keys, current if isinstance(current, dict) else {}, value, sub)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list):
            out[key] = _smp_list(keys, current if isinstance(current, list) else [], value, sub)
        else:
            out[key] = copy.deepcopy(value)
    for key, values in deletions.items():
        if isinstance(out.get(key), list):
            out[key] = [v for v in out[key] if v not in values]
    for key, order in orders.items():
        if isinstance(out.get(key), list):
            out[key] = _reorder(keys((*path, key)), out[key], order)
    if isinstance(retain, list):
        for key in list(out):
            if key not in retain and key not in patch:
                del out[key]
    return out


def _smp_list(keys: KeyLookup, target: list[Any], patch: list[Any], path: Path) -> list[Any]:
    key = keys(path)
    replace = any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch)
    if replace:
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    if key is None:
        if is_primitive_set(path):
            out = list(target)
            for value in patch:
                if value not in out:
                    out.append(copy.deepcopy(value))
            return out
        return copy.deepcopy(patch)
    out = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict):
            raise _invalid(f"{'.'.join(path)}: elements must be objects with a {key!r} key")
        if key not in item:
            raise _invalid(f"{'.'.join(path)}: an element is missing its merge key {key!r}")
        index = next(
            (i for i, e in enumerate(out) if isinstance(e, dict) and e.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
            continue
        if index is None:
            cleaned = _smp_map(keys, {}, item, path)
            out.append(cleaned)
        else:
            out[index] = _smp_map(keys, out[index], item, path)
    return out


def _reorder(key: str | None, items: list[Any], order: list[Any]) -> list[Any]:
    def ident(value: Any) -> Any:
        return value.get(key) if key is not None and isinstance(value, dict) else value

    wanted = [ident(o) for o in order]
    rank = {repr(v): i for i, v in enumerate(wanted)}
    indexed = list(enumerate(items))
    indexed.sort(key=lambda pair: (rank.get(repr(ident(pair[1])), len(rank)), pair[0]))
    return [item for _, item in indexed]


# --- RFC 6902 --------------------------------------------------------------------------------


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise errors.bad_request(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], op: str) -> Any:
    cur = doc
    for part in parts:
        if isinstance(cur, dict):
            if part not in cur:
                raise _invalid(f"{op}: path /{'/'.join(parts)} does not exist")
            cur = cur[part]
        elif isinstance(cur, list):
            cur = cur[_index(cur, part, op, parts, allow_end=False)]
        else:
            raise _invalid(f"{op}: path /{'/'.join(parts)} does not exist")
    return cur


def _index(seq: list[Any], part: str, op: str, parts: list[str], *, allow_end: bool) -> int:
    if part == "-" and allow_end:
        return len(seq)
    if not part.isdigit() or (len(part) > 1 and part.startswith("0")):
        raise _invalid(f"{op}: invalid array index {part!r} in /{'/'.join(parts)}")
    i = int(part)
    limit = len(seq) if allow_end else len(seq) - 1
    if i > limit:
        raise _invalid(f"{op}: array index {i} out of bounds in /{'/'.join(parts)}")
    return i


def _add(doc: Any, parts: list[str], value: Any, op: str) -> Any:
    if not parts:
        return copy.deepcopy(value)
    parent = _walk(doc, parts[:-1], op)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, op, parts, allow_end=True), copy.deepcopy(value))
    else:
        raise _invalid(f"{op}: cannot add to a scalar at /{'/'.join(parts[:-1])}")
    return doc


def _remove(doc: Any, parts: list[str], op: str) -> tuple[Any, Any]:
    if not parts:
        raise _invalid(f"{op}: cannot remove the whole document")
    parent = _walk(doc, parts[:-1], op)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _invalid(f"{op}: path /{'/'.join(parts)} does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, op, parts, allow_end=False))
    raise _invalid(f"{op}: path /{'/'.join(parts)} does not exist")


def json_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, list):
        raise errors.bad_request("a JSON patch must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for number, operation in enumerate(patch):
        if not isinstance(operation, dict) or "op" not in operation:
            raise errors.bad_request(f"JSON patch operation {number} has no 'op'")
        op = operation["op"]
        parts = _pointer(operation.get("path"))
        if op == "add":
            if "value" not in operation:
                raise errors.bad_request(f"JSON patch operation {number} (add) has no 'value'")
            doc = _add(doc, parts, operation["value"], op)
        elif op == "remove":
            doc, _ = _remove(doc, parts, op)
        elif op == "replace":
            if "value" not in operation:
                raise errors.bad_request(f"JSON patch operation {number} (replace) has no 'value'")
            _walk(doc, parts, op)
            doc, _ = _remove(doc, parts, op) if parts else (doc, None)
            doc = _add(doc, parts, operation["value"], op)
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from"))
            if op == "move":
                if parts[: len(source)] == source and parts != source:
                    raise _invalid("move: cannot move a value into one of its children")
                doc, value = _remove(doc, source, op)
            else:
                value = copy.deepcopy(_walk(doc, source, op))
            doc = _add(doc, parts, value, op)
        elif op == "test":
            if _walk(doc, parts, op) != operation.get("value"):
                raise _invalid(f"test failed: /{'/'.join(parts)} does not hold the given value")
        else:
            raise errors.bad_request(f"JSON patch operation {number} has an unknown op {op!r}")
    return doc
