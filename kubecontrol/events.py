"""Kubernetes Events on the objects a controller works on: how a user learns what it did
and why something is not happening (the agent on Configurations, the managers on CSRs and
their Lease).

Best effort: an Event that cannot be posted is logged at debug and dropped
(the same message is always logged by the caller). Repeats of the same
(object, reason, message) are suppressed, so an object in back-off does
not post an Event per retry; the table is bounded and forgets the oldest.
Events of cluster-scoped objects go to namespace ``default``, as client-go's recorder does.
"""

from __future__ import annotations

import collections
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from kubecontrol import kubeapi

logger = logging.getLogger(__name__)

_MAX_REMEMBERED = 1024


class Recorder:
    def __init__(self, api: kubeapi.KubeApi, host: str, component: str = "edgehub-agent"):
        """``host``: the node (agent) or Pod (manager) that reports, ``source.host``."""
        self.api = api
        self.host = host
        self.component = component
        self._last: collections.OrderedDict[tuple[str, str, str], str] = collections.OrderedDict()

    async def post(self, obj: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        key = (uid, kind, reason)
        if self._last.get(key) == message:
            return
        self._last[key] = message
        self._last.move_to_end(key)
        while len(self._last) > _MAX_REMEMBERED:
            self._last.popitem(last=False)
        own_namespace = str(meta.get("namespace") or "")
        namespace = own_namespace or "default"
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": meta.get("name", ""),
                "namespace": own_namespace,
                "uid": uid,
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }
        try:
            await self.api.create(kubeapi.EVENTS, namespace, event)
        except kubeapi.KubeError as e:
            logger.debug("could not post event %s on %s: %s", reason, meta.get("name"), e)

    def clear(self, obj: Mapping[str, Any], reason: str) -> None:
        """Allow ``reason`` to be posted again (the condition went away)."""
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        for key in [k for k in self._last if k[0] == uid and k[2] == reason]:
            del self._last[key]
