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
    staticsets,
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
        staticsets.NAME: staticsets.build,
    }
)


class UnknownController(ValueError):
    pass


YSS_OWNERS = ("edgehub", "yurt-manager")


def for_owner(chosen: Sequence[str], spec: str, owner: str) -> tuple[str, ...]:
    """``chosen`` as ``--yurtstaticset-owner=owner`` allows: with ``yurt-manager`` the
    ``yurtstaticset`` controller is left out of ``*``, and naming it is a contradiction
    (UnknownController); with ``edgehub`` nothing changes."""
    if owner not in YSS_OWNERS:
        raise UnknownController(
            f"--yurtstaticset-owner={owner!r}: must be one of {', '.join(YSS_OWNERS)}"
        )
    if owner == "edgehub" or staticsets.NAME not in chosen:
        return tuple(chosen)
    named = any(item.strip() == staticsets.NAME for item in spec.split(","))
    if named:
        raise UnknownController(
            f"--controllers names {staticsets.NAME} but --yurtstaticset-owner=yurt-manager: "
            "only one controller may own YurtStaticSets; set --yurtstaticset-owner=edgehub"
        )
    left = tuple(name for name in chosen if name != staticsets.NAME)
    if not left:
        raise UnknownController(f"--controllers={spec!r} selects no controller")
    return left


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
