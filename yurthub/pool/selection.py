"""What one list/watch client asked to see: namespace, name, label and field selectors.

PURE. Field selectors are checked against the fields the resource can be selected by
(``yurthub.cache.selectors.supported_fields``: for services ``metadata.name``,
``metadata.namespace``, ``spec.clusterIP``, ``spec.type``; for other kinds name and namespace),
as kube-apiserver does: anything else is a 400 ``field label not supported``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from yurthub import statuses
from yurthub.cache import selectors


@dataclasses.dataclass(frozen=True, slots=True)
class Selection:
    namespace: str = ""
    """Empty: every namespace."""
    name: str = ""
    """Empty: every name (a watch on one object or a ``metadata.name`` field selector)."""
    labels: selectors.LabelSelector = dataclasses.field(default_factory=selectors.LabelSelector)
    fields: selectors.FieldSelector = dataclasses.field(default_factory=selectors.FieldSelector)

    def matches(
        self, namespace: str, name: str, labels: Mapping[str, str], fields: Mapping[str, str]
    ) -> bool:
        if self.namespace and namespace != self.namespace:
            return False
        if self.name and name != self.name:
            return False
        return self.labels.matches(labels) and self.fields.matches(fields)


def build(
    resource: str, namespace: str, name: str, label_selector: str, field_selector: str
) -> Selection | statuses.Status:
    """The selection of a request, or the 400 ``Status`` the apiserver would answer."""
    try:
        labels = selectors.parse_labels(label_selector)
        fields = selectors.parse_fields(field_selector)
    except selectors.SelectorError as e:
        return statuses.failure(400, str(e))
    unsupported = list(selectors.unsupported(resource, fields))
    if unsupported:
        return statuses.failure(400, f"field label not supported: {unsupported[0]}")
    return Selection(namespace=namespace, name=name, labels=labels, fields=fields)
