"""Include/Exclude filter lists (Akri ``FilterList``), shared by the OPC UA and ONVIF handlers.

Semantics (Akri ``discovery-utils/src/filtering.rs``): no filter includes everything;
``Include`` keeps exactly the listed items (so an empty Include list keeps nothing);
``Exclude`` drops the listed items. Comparison is exact; callers normalise case first where
the protocol says identifiers are case-insensitive.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from discovery import details


class Action(enum.Enum):
    INCLUDE = "Include"
    EXCLUDE = "Exclude"


@dataclasses.dataclass(frozen=True, slots=True)
class FilterList:
    items: tuple[str, ...]
    action: Action = Action.INCLUDE

    def normalised(self) -> FilterList:
        """The same filter with lower-cased items (for case-insensitive identifiers)."""
        return FilterList(tuple(item.lower() for item in self.items), self.action)


def should_include(filter_list: FilterList | None, item: str) -> bool:
    if filter_list is None:
        return True
    listed = item in filter_list.items
    return listed if filter_list.action is Action.INCLUDE else not listed


def is_active(filter_list: FilterList | None) -> bool:
    """Whether the filter can reject anything (an empty Exclude list cannot)."""
    if filter_list is None:
        return False
    return filter_list.action is Action.INCLUDE or bool(filter_list.items)


def parse(value: Any, field: str) -> FilterList | None:
    """Parse ``{items: [...], action: Include|Exclude}`` (action defaults to Include)."""
    if details.is_null(value):
        return None
    spec = details.mapping(value, field, ("items", "action"))
    items = details.string_list(
        details.required(spec, "items", field), details.join(field, "items")
    )
    action = Action.INCLUDE
    if "action" in spec:
        action = Action(
            details.choice(spec["action"], details.join(field, "action"), [a.value for a in Action])
        )
    return FilterList(tuple(items), action)
