"""JSON merge patch (RFC 7386) for offline answers to ``PATCH`` with a merge patch.

PURE. Offline the hub cannot apply a mutation anywhere that matters (the cloud is away), so
update/patch answers are the cached object. For a merge patch we do one better: the answer
shows the client its own patch applied to the cached object, so a client that reads back a
field it just set sees it. Nothing is stored: the cloud never saw the patch, and the next real
answer from the cloud replaces whatever the client believes.

Bounded: a patch, or a patched object, nested deeper than ``nesting.MAX_DEPTH`` is a
:class:`PatchError` (the merge recurses along the patch, and the answer must encode).
"""

from __future__ import annotations

from typing import Any

from inputbounds import nesting

MERGE_PATCH = "application/merge-patch+json"


class PatchError(ValueError):
    """A patch that is not applied: the message says why (answered as a 400)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    try:
        nesting.check(patch)
    except nesting.TooDeep as e:
        raise PatchError(f"the patch is {e}") from e
    patched = _merged(target, patch)
    try:
        nesting.check(patched)
    except nesting.TooDeep as e:
        raise PatchError(f"the patched object would be {e}") from e
    return patched


def _merged(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merged(result.get(key), value)
    return result
