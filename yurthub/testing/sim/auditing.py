"""The audit log of one simulated apiserver: who asked for what, and the answer's code.

The sim authorizes everything, so tests that care about permissions (does a
ClusterRole cover every request a component makes?) or about routing (which of
two apiservers served a request?) read this log instead. One bounded log per
``SimApiserver``; records are appended when the response status is known (for a
watch or ``logs -f``: when the stream starts).

Records never hold request bodies or credentials.
"""

from __future__ import annotations

import collections
import dataclasses

from yurthub.testing.sim import paths

DEFAULT_SIZE = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    user: str
    groups: tuple[str, ...]
    verb: str
    path: str
    code: int
    user_agent: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def rbac(self) -> tuple[str, str, str]:
        """(verb, apiGroup, resource[/subresource]) as an RBAC rule would name it."""
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return (self.verb, self.group, resource)


def verb_of(method: str, parsed: paths.ResourcePath | None, watch: bool) -> str:
    """The Kubernetes verb of a request (non-resource requests: the lowercased method)."""
    if parsed is None:
        return method.lower()
    if method == "GET":
        if watch or parsed.watch_prefix:
            return "watch"
        return "get" if parsed.name is not None else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if parsed.name is not None else "deletecollection"
    return method.lower()


class AuditLog:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._records: collections.deque[Record] = collections.deque(maxlen=size)

    def append(self, record: Record) -> None:
        self._records.append(record)

    def records(self) -> list[Record]:
        return list(self._records)

    def clear(self) -> None:
        self._records.clear()
