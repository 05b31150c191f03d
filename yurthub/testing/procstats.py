"""What a process costs, from ``/proc``: CPU seconds (user + system) and resident memory.

A component of the test bed runs in a session of its own (``processes.Process``), so
``session`` reads a whole component with whatever it forked. ``Usage`` pairs a reading's CPU
seconds and RSS; ``millicores`` turns two readings into an average over the time between them.
A process that is gone reads as zero (a reading never fails a bench half way).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterable

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    cpu_seconds: float
    rss_bytes: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_seconds + other.cpu_seconds, self.rss_bytes + other.rss_bytes)


ZERO = Usage(0.0, 0)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command (field 2) may hold spaces and parentheses: split after the last ')'.
    return stat.rsplit(")", 1)[1].split()


def usage(pid: int) -> Usage:
    """One process's CPU seconds so far and its RSS now (zero if it is gone)."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 22 or fields[0] == "Z":
        return ZERO
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    return Usage(cpu, int(fields[21]) * PAGE)


def sessions(sids: Iterable[int]) -> dict[int, Usage]:
    """The summed usage of each session in ``sids`` (components started by
    ``processes.Process``: a session each), from one pass over ``/proc``."""
    wanted = {str(sid): sid for sid in sids}
    out = dict.fromkeys(wanted.values(), ZERO)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        # Field 6 of stat, the session id, is the 4th after the command.
        if fields is None or len(fields) < 22 or fields[0] == "Z" or fields[3] not in wanted:
            continue
        sid = wanted[fields[3]]
        cpu = (int(fields[11]) + int(fields[12])) / TICKS
        out[sid] = out[sid] + Usage(cpu, int(fields[21]) * PAGE)
    return out


def millicores(before: Usage, after: Usage, seconds: float) -> float:
    """Average CPU between two readings, in thousandths of a core. PURE."""
    if seconds <= 0:
        return 0.0
    return max(0.0, after.cpu_seconds - before.cpu_seconds) / seconds * 1000.0
