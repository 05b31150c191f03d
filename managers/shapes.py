"""What the manager's controllers read of Pods and Nodes: the shapes their informers keep (pure).

At fleet size the informers are the manager's memory: 50,000 Pods and 5,000 Nodes held whole
would cost several kilobytes each; these shapes keep what the controllers read and no more
(``kubecontrol.trimming``), with repeated values shared. A field a controller starts to read
must be added here, or the controller sees it absent: the table tests in
``tests/unit/managers/test_managers_shapes.py`` hold each controller's reads to its shape.

``NODE`` (one shared informer for ``autonomy``, ``nodewatcher``, ``hubleader`` and
``yurtstaticset``):

* metadata: name, uid, resourceVersion (Events name the object), deletionTimestamp
  (``nodepools.read_node``), every label (the pool label, ``openyurt.io/is-edge-worker``, and
  whatever a NodePool's ``leaderNodeLabelSelector`` names), and of the annotations only the
  autonomy ones ``nodeautonomy.marking`` reads.
* status: the ``Ready`` conditions (type, status, lastTransitionTime: readiness and since when)
  and the addresses (type, address: a leader's InternalIP).

``AUTONOMY_POD`` (the ``autonomy`` controller's bound, unfinished Pods): name, namespace, uid,
resourceVersion, deletionTimestamp; the annotations ``tolerating`` reads (its own record and
the mirror-Pod mark); each owner reference's kind and controller flag (a DaemonSet's Pods are
left alone); ``spec.nodeName``, ``spec.tolerations`` whole (they are written back whole, in a
merge patch); ``status.phase``. Everything else (containers, volumes, the rest of the status)
is dropped. ``spec`` (the node and tolerations its Pods share), ``status``, the owner kinds and
the annotations are shared between Pods that carry equal ones.
"""

from __future__ import annotations

from typing import Any

from kubecontrol import trimming
from kubecontrol.trimming import INTERN, KEEP, Fields, Items, Shared
from managers import tolerating
from nodeautonomy import marking


def _ready_condition(condition: Any) -> bool:
    return isinstance(condition, dict) and condition.get("type") == "Ready"


NODE = trimming.Shape(
    {
        "metadata": {
            "name": KEEP,
            "uid": KEEP,
            "resourceVersion": KEEP,
            "namespace": INTERN,
            "deletionTimestamp": KEEP,
            "labels": INTERN,
            "annotations": Shared(
                Fields(
                    {
                        marking.DURATION_ANNOTATION: KEEP,
                        marking.LEGACY_ANNOTATION: KEEP,
                    }
                )
            ),
        },
        "status": {
            "conditions": Items(
                {"type": INTERN, "status": INTERN, "lastTransitionTime": INTERN},
                where=_ready_condition,
            ),
            "addresses": Items({"type": INTERN, "address": KEEP}),
        },
    },
    name="nodes",
)

AUTONOMY_POD = trimming.Shape(
    {
        "metadata": {
            "name": KEEP,
            "namespace": INTERN,
            "uid": KEEP,
            "resourceVersion": KEEP,
            "deletionTimestamp": KEEP,
            "annotations": Shared(
                Fields(
                    {
                        tolerating.MANAGED_ANNOTATION: KEEP,
                        tolerating.MIRROR_ANNOTATION: KEEP,
                    }
                )
            ),
            "ownerReferences": Shared(Items({"kind": KEEP, "controller": KEEP})),
        },
        "spec": Shared(Fields({"nodeName": KEEP, "tolerations": KEEP})),
        "status": Shared(Fields({"phase": KEEP})),
    },
    name="pods:autonomy",
)
