"""JSON merge patch (RFC 7386) for offline answers to ``PATCH`` with a merge patch.

PURE. Offline the hub cannot apply a mutation anywhere that matters (the cloud is away), so
update/patch answers are the cached object. For a merge patch we do one better: the answer
shows the client its own patch applied to the cached object, so a client that reads back a
field it just set sees it. Nothing is stored: the cloud never saw the patch, and the next real
answer from the cloud replaces whatever the client believes.
"""

from __future__ import annotations

from typing import Any

MERGE_PATCH = "application/merge-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
