"""Directories a tool makes for itself in a place the user names, and may clear later.

``edgehub demo --workdir`` and ``edgehub cluster up --dir`` write into a directory the user
chooses and clear what an earlier run left there. Rule: a tool clears only a directory that
carries the marker file it wrote when it made it (``.edgehub-demo``, ``.edgehub-cluster``).
A missing directory is made and marked; an empty one is marked (nothing in it can be lost);
any other one (a user's own ``./demo``) is refused with ``NotOursError`` and nothing in it is
touched: not deleted, not overwritten.

``decide`` is the pure decision, ``check`` reads the directory and decides (read-only, so a
command can refuse before any other work), ``claim`` carries the decision out.

Danger: the marker says the whole directory is the tool's. A file a user adds to a marked
directory goes with the next clear, as the commands' help says.
"""

from __future__ import annotations

import enum
import os
import pathlib
import shutil
from collections.abc import Collection


class Plan(enum.Enum):
    CREATE = "create"
    """Missing: make it and mark it."""
    ADOPT = "adopt"
    """An empty directory: mark it."""
    OURS = "ours"
    """It carries the marker: the tool made it and may clear it."""
    REFUSE = "refuse"
    """Someone else's: leave it alone."""


class NotOursError(Exception):
    """``path`` exists and the tool did not make it; nothing in it was touched."""

    def __init__(self, path: pathlib.Path, marker: str, why: str) -> None:
        super().__init__(f"{path} {why} (it has no {marker}); left as it is")
        self.path = path
        self.marker = marker


def decide(names: Collection[str] | None, marker: str) -> Plan:
    """PURE. ``names``: the directory's entries, ``None`` when it does not exist."""
    if names is None:
        return Plan.CREATE
    if marker in names:
        return Plan.OURS
    return Plan.REFUSE if names else Plan.ADOPT


def check(path: pathlib.Path, marker: str) -> Plan:
    """What ``claim`` would do with ``path``; ``NotOursError`` instead of ``Plan.REFUSE``."""
    try:
        names: list[str] | None = os.listdir(path)
    except FileNotFoundError:
        names = None
    except NotADirectoryError:
        raise NotOursError(path, marker, "is not a directory") from None
    plan = decide(names, marker)
    if plan is Plan.REFUSE:
        raise NotOursError(path, marker, "holds files edgehub did not make")
    return plan


def claim(path: pathlib.Path, marker: str, note: str, *, clear: bool, mode: int = 0o700) -> Plan:
    """Make ``path`` a directory of ours with mode ``mode`` and ``marker`` in it (``note`` its
    text); with ``clear``, a directory already ours is emptied first. Raises ``NotOursError``
    (nothing touched) or ``OSError``."""
    plan = check(path, marker)
    if plan is Plan.OURS and clear:
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    os.chmod(path, mode)
    fd = os.open(path / marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(note + "\n")
    return plan
