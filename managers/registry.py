"""The controllers ``edgehub manager`` knows, and ``--controllers`` parsing (pure).

``FACTORIES`` maps a controller's name to ``build(context) -> Controller``; the order is the
order they start in. ``select`` reads kube-controller-manager's syntax: a comma list where
``*`` is every controller, ``name`` enables one and ``-name`` disables one.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence

from kubecontrol import controlling
from managers import (
    autonomy,
    brokers,
    context,
    csrapprover,
    hubleader,
    hubleaderconfig,
    hubleaderrbac,
    nodewatcher,
)

Factory = Callable[[context.Context], controlling.Controller]

FACTORIES: Mapping[str, Factory] = types.MappingProxyType(
    {
        csrapprover.NAME: csrapprover.build,
        brokers.NAME: brokers.build,
        nodewatcher.NAME: nodewatcher.build,
        autonomy.NAME: autonomy.build,
        hubleader.NAME: hubleader.build,
        hubleaderconfig.NAME: hubleaderconfig.build,
        hubleaderrbac.NAME: hubleaderrbac.build,
    }
)


class UnknownController(ValueError):
    pass


def select(spec: str, known: Sequence[str] = tuple(FACTORIES)) -> tuple[str, ...]:
    """The controllers ``spec`` enables, in ``known`` order; ValueError naming the known ones."""
    enabled: set[str] = set()
    disabled: set[str] = set()
    items = [item.strip() for item in spec.split(",") if item.strip()]
    for item in items:
        if item == "*":
            enabled.update(known)
            continue
        name = item[1:] if item.startswith("-") else item
        if name not in known:
            raise UnknownController(
                f"unknown controller {name!r}; known controllers: {', '.join(known)} "
                "('*' for all, '-name' to leave one out)"
            )
        (disabled if item.startswith("-") else enabled).add(name)
    chosen = tuple(name for name in known if name in enabled and name not in disabled)
    if not chosen:
        raise UnknownController(
            f"--controllers={spec!r} selects no controller; known controllers: {', '.join(known)}"
        )
    return chosen
