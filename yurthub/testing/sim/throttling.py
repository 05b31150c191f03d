"""429s on purpose: the simulated apiserver pushing back as API Priority and Fairness does.

kube-apiserver answers a request whose priority level has no seat and no queue room with
``429 Too Many Requests``: a plain-text body (``Too many requests, please try again later.``,
no ``Status``: checked on the real apiserver), a ``Retry-After`` header, and APF's
``X-Kubernetes-PF-FlowSchema-UID`` / ``X-Kubernetes-PF-PriorityLevel-UID`` naming the flow
schema and priority level that matched. ``as_status`` answers the other 429 it sends, a
``TooManyRequests`` Status with ``details.retryAfterSeconds`` (its watch cache still
initialising after a restart).
A test makes the sim do the same with ``SimApiserver.throttle(...)``: every request a
``Throttle`` matches (verbs, resources, User-Agent prefixes, users; empty means any) is
refused so, ``count`` times or until ``SimApiserver.unthrottle``; ``refused`` counts them.

PURE: ``Throttle.matches`` and ``status``; the middleware in ``handlers`` carries them out.
"""

from __future__ import annotations

import dataclasses
import uuid

from yurthub import statuses

FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
MESSAGE = "Too many requests, please try again later."


@dataclasses.dataclass(slots=True)
class Throttle:
    verbs: frozenset[str] = frozenset()
    """Kubernetes verbs (``list``, ``watch``, ``get``, ``update``...); empty: any."""
    resources: frozenset[str] = frozenset()
    """Resource names (``configmaps``); empty: any resource request."""
    user_agents: tuple[str, ...] = ()
    """User-Agent prefixes (``kubelet/``); empty: any."""
    users: frozenset[str] = frozenset()
    """Authenticated user names; empty: any."""
    count: int | None = None
    """How many requests to refuse (None: every one until lifted)."""
    retry_after: int = 1
    """Seconds the answer's ``Retry-After`` asks for (APF: 1)."""
    as_status: bool = False
    """Answer a ``Status`` (the watch cache initialising) instead of APF's plain text."""
    flow_schema_uid: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))
    priority_level_uid: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))
    refused: int = 0
    """Requests refused so far."""

    def matches(self, verb: str, resource: str, user_agent: str, user: str) -> bool:
        """Whether a request is refused now (PURE; ``take`` counts it)."""
        if self.count is not None and self.refused >= self.count:
            return False
        if not resource:
            return False  # APF exempts nothing here, but non-resource paths are not the point
        if self.verbs and verb not in self.verbs:
            return False
        if self.resources and resource not in self.resources:
            return False
        if self.user_agents and not user_agent.startswith(self.user_agents):
            return False
        return not self.users or user in self.users

    def take(self) -> None:
        self.refused += 1

    def headers(self) -> dict[str, str]:
        return {
            "Retry-After": str(self.retry_after),
            FLOW_SCHEMA_HEADER: self.flow_schema_uid,
            PRIORITY_LEVEL_HEADER: self.priority_level_uid,
            "X-Content-Type-Options": "nosniff",
        }

    def body(self) -> tuple[str, bytes]:
        """(Content-Type, body) of the refusal."""
        if self.as_status:
            return "application/json", statuses.encode(self.status())
        return "text/plain; charset=utf-8", (MESSAGE + "\n").encode()

    def status(self) -> statuses.Status:
        return statuses.failure(
            429,
            MESSAGE,
            reason="TooManyRequests",
            details={"retryAfterSeconds": self.retry_after},
        )
