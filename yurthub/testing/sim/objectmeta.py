"""Object metadata rules: names, generateName, uids, timestamps, what a write may not change.

Pure helpers over plain dicts; ``storage`` applies them. Names are validated the
way the apiserver does for the kind (DNS subdomain, DNS label for namespaces and
services, path segment for RBAC objects), with its wording, so a bad name is a
422 a client can read.
"""

from __future__ import annotations

import datetime
import re
import secrets
import uuid
from typing import Any

from yurthub.testing.sim import errors, resources

_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# generateName suffixes avoid vowels and look-alike characters, as upstream does.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
DNS_LABEL_KINDS = frozenset({"namespaces", "services"})
PATH_SEGMENT_GROUPS = frozenset({"rbac.authorization.k8s.io"})


def timestamp(now: float) -> str:
    """RFC 3339 in UTC with second precision: the apiserver's ``metav1.Time`` form."""
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_timestamp(now: float) -> str:
    """``metav1.MicroTime``: microseconds, as Lease and events.k8s.io use."""
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(value: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def new_uid() -> str:
    return str(uuid.uuid4())


def generate_name(prefix: str) -> str:
    # Upstream cuts the prefix so that prefix + 5 characters stays within 63.
    return prefix[:58] + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))


def validate_name(rt: resources.ResourceType, name: str) -> None:
    if rt.group in PATH_SEGMENT_GROUPS:
        if name in (".", "..") or "/" in name or "%" in name:
            raise errors.invalid(
                rt.kind,
                name,
                f'metadata.name: Invalid value: "{name}": may not be "." or ".." and may not '
                "contain '/' or '%'",
                rt.group,
            )
        return
    if rt.resource in DNS_LABEL_KINDS:
        if len(name) > 63 or not _LABEL_RE.fullmatch(name):
            raise errors.invalid(
                rt.kind,
                name,
                f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 label must '
                "consist of lower case alphanumeric characters or '-', and must start and end "
                "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                rt.group,
            )
        return
    if len(name) > 253 or not _SUBDOMAIN_RE.fullmatch(name):
        raise errors.invalid(
            rt.kind,
            name,
            f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
            "consist of lower case alphanumeric characters, '-' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            rt.group,
        )


def validate_metadata(rt: resources.ResourceType, meta: dict[str, Any], name: str) -> None:
    """The label/annotation shapes a client can get wrong; values must be strings."""
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise errors.invalid(
                rt.kind, name, f"metadata.{field}: Invalid value: must map strings to strings"
            )
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
    ):
        raise errors.invalid(rt.kind, name, "metadata.finalizers: Invalid value: must be strings")
    owners = meta.get("ownerReferences")
    if owners is not None:
        if not isinstance(owners, list):
            raise errors.invalid(rt.kind, name, "metadata.ownerReferences: must be a list")
        for ref in owners:
            if not isinstance(ref, dict) or not ref.get("uid") or not ref.get("name"):
                raise errors.invalid(
                    rt.kind,
                    name,
                    "metadata.ownerReferences: Invalid value: each needs apiVersion, kind, "
                    "name and uid",
                )


def drop_empty(meta: dict[str, Any]) -> None:
    """Empty maps and lists a Go client never sends (``omitempty``) are not stored either."""
    for field in ("labels", "annotations", "finalizers", "ownerReferences"):
        if field in meta and not meta[field]:
            del meta[field]


def strip_server_fields(meta: dict[str, Any]) -> None:
    """Fields a client may send but the server owns on create."""
    for field in (
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "selfLink",
        "managedFields",
    ):
        meta.pop(field, None)
