"""How deeply a caller's JSON or YAML nests, bounded before anything walks it recursively.

PURE. The agent's and the manager's copy of ``yurthub.nesting`` (the import contracts keep
the hub and them apart): the Configuration webhook checks an AdmissionReview here before
walking it (deep copies, comparisons, re-encoding), and ``discovery.details`` composes
``discoveryDetails`` with :class:`BoundedSafeLoader` (PyYAML's composer recurses: 5,000
nested ``[`` were a ``RecursionError``). Past :data:`MAX_DEPTH` (200: below orjson's 254-level
encoder limit, far above real objects; Akri's Configuration CRD nests 19 levels) the caller
reports a problem naming the limit.

* :func:`depth` / :func:`check`: nesting of decoded JSON values, counted without recursion
  (a scalar is 0, ``[]`` 1, ``{"a": []}`` 2); counting stops past the limit.
* :class:`BoundedSafeLoader` / :func:`load_yaml`: ``yaml.safe_load`` whose composer counts
  collections and stops past the limit with a ``yaml.YAMLError``.

Keep the two copies alike: ``tests/unit/test_nesting.py`` runs the same table on both.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 200


class TooDeep(ValueError):
    """A value nests deeper than ``limit`` levels."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"nested deeper than {limit} levels")


def depth(value: object, limit: int = MAX_DEPTH) -> int:
    """How many dicts/lists nest in ``value`` (iteratively); ``limit + 1`` once past it."""
    deepest = 0
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if level > deepest:
            deepest = level
            if deepest > limit:
                return deepest
        pending.extend((c, level + 1) for c in children if isinstance(c, dict | list | tuple))
    return deepest


def check(value: object, limit: int = MAX_DEPTH) -> None:
    """``TooDeep`` when ``value`` nests deeper than ``limit``."""
    if depth(value, limit) > limit:
        raise TooDeep(limit)


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing collections nested deeper than ``limit``."""

    limit = MAX_DEPTH

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._levels = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        opens = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
        if not opens:
            return super().compose_node(parent, index)
        self._levels += 1
        try:
            if self._levels > self.limit:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {self.limit} levels", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._levels -= 1


def load_yaml(text: str | bytes) -> Any:
    """``yaml.safe_load`` bounded to :data:`MAX_DEPTH`; ``yaml.YAMLError`` past it."""
    return yaml.load(text, Loader=BoundedSafeLoader)  # a SafeLoader subclass
