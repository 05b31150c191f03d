"""How a Node says it is autonomous (pure): its annotations and labels -> one ``Marking``.

- ``node.openyurt.io/autonomy-duration: <Go duration>``: autonomous for that long (how long the
  cloud keeps its pods while it is unreachable); ``0`` = for as long as it takes. A positive
  duration is rounded **up** to whole seconds (tolerations count seconds; ``500ms`` must not
  become 0, which would mean "evict at once"). A negative or unparseable value is ``Invalid``:
  treated as not autonomous, and reported (the manager posts an Event naming the value, the
  hub's ``Autonomy`` condition says why).
- ``node.beta.openyurt.io/autonomy: "true"`` (OpenYurt's older annotation): autonomous for as
  long as it takes. Any other value (``false``, ``True``, empty) is not autonomous, as in
  OpenYurt. The duration annotation wins when both are set.
- ``openyurt.io/is-edge-worker: "false"`` (OpenYurt's cloud node label): never autonomous,
  whatever the annotations say (a cloud node's pods should move when it is gone).

The hub and the manager both read a node through ``read``: the pods' tolerations and the
hub's ``Autonomy`` condition never disagree about what a node asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from nodeautonomy import durations

DURATION_ANNOTATION = "node.openyurt.io/autonomy-duration"
LEGACY_ANNOTATION = "node.beta.openyurt.io/autonomy"
EDGE_WORKER_LABEL = "openyurt.io/is-edge-worker"
_MAX_SHOWN = 64


@dataclasses.dataclass(frozen=True, slots=True)
class Autonomous:
    seconds: int | None
    """How long the cloud waits for the node (None: forever)."""
    annotation: str
    """The annotation that says so."""

    def describe(self) -> str:
        if self.seconds is None:
            return "for as long as it takes"
        return f"for {durations.format_seconds(self.seconds)}"


@dataclasses.dataclass(frozen=True, slots=True)
class NotAutonomous:
    reason: str
    """``unmarked`` or ``cloud node``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Invalid:
    value: str
    error: str

    def describe(self) -> str:
        shown = self.value if len(self.value) <= _MAX_SHOWN else self.value[:_MAX_SHOWN] + "..."
        return (
            f"{DURATION_ANNOTATION}={shown!r} is not a valid duration ({self.error}); "
            "use a Go duration such as 30m, 24h or 0 (= for as long as it takes). "
            "The node is treated as not autonomous"
        )


Marking = Autonomous | NotAutonomous | Invalid

UNMARKED = NotAutonomous("unmarked")
CLOUD_NODE = NotAutonomous("cloud node")


def read(annotations: Mapping[str, str] | None, labels: Mapping[str, str] | None) -> Marking:
    """What ``annotations`` and ``labels`` of a Node say about its autonomy."""
    annotations = annotations or {}
    if (labels or {}).get(EDGE_WORKER_LABEL) == "false":
        return CLOUD_NODE
    value = annotations.get(DURATION_ANNOTATION)
    if value is not None:
        return _duration(str(value))
    if annotations.get(LEGACY_ANNOTATION) == "true":
        return Autonomous(None, LEGACY_ANNOTATION)
    return UNMARKED


def _duration(value: str) -> Marking:
    try:
        nanoseconds = durations.parse(value)
    except ValueError as e:
        return Invalid(value, str(e))
    if nanoseconds < 0:
        return Invalid(value, "a duration must not be negative")
    if nanoseconds == 0:
        return Autonomous(None, DURATION_ANNOTATION)
    return Autonomous(-(-nanoseconds // durations.SECOND), DURATION_ANNOTATION)


def of_node(node: Mapping[str, object]) -> Marking:
    """``read`` over a Node object (a JSON dict); odd shapes read as unmarked."""
    meta = node.get("metadata")
    if not isinstance(meta, Mapping):
        return UNMARKED
    annotations = meta.get("annotations")
    labels = meta.get("labels")
    return read(
        annotations if isinstance(annotations, Mapping) else None,
        labels if isinstance(labels, Mapping) else None,
    )
