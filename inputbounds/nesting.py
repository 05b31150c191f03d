"""How deeply a caller's JSON or YAML nests, bounded before anything walks it recursively.

PURE. Recursive code over caller input (a merge patch, a re-encoded body, PyYAML's composer)
fails at some depth: orjson's encoder at 255 levels (``TypeError``), Python's own frames near
1,000 (``RecursionError``). Both surfaced as 500s with a traceback per request. Callers check
here first and answer a 400 naming the limit instead.

:data:`MAX_DEPTH` is 200: below orjson's 254 with room for what an answer wraps around an
object (a list, a watch event), and far above real objects (Akri's Configuration CRD nests
19 levels, a list of Deployments 15). Go's ``encoding/json`` stops at 10,000; nothing we answer
could be encoded that deep, so the smaller bound is the honest one.

* :func:`depth` / :func:`check`: nesting of decoded JSON values, counted without recursion
  (a scalar is 0, ``[]`` 1, ``{"a": []}`` 2); counting stops past the limit.
* :func:`load_yaml`: ``yaml.safe_load`` whose composer (PyYAML's only recursive stage) counts
  collections and stops past the limit with a ``yaml.YAMLError``, so callers that already map
  bad YAML to a clear error need nothing more.

One copy for every process: the hub (patches, offline answers, kubeconfigs, the simulator's
bodies), the Configuration webhook (an AdmissionReview before walking it), ``discovery.details``
(``discoveryDetails`` composed with :class:`BoundedSafeLoader`) and ``edgehub discover``.
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
