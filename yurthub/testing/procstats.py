"""What a process costs, from ``/proc``: CPU seconds (user + system) and resident memory.

A component of the test bed runs in a session of its own (``processes.Process``), so
``session`` reads a whole component with whatever it forked. ``Usage`` pairs a reading's CPU
seconds and RSS; ``millicores`` turns two readings into an average over the time between them.
A process that is gone reads as zero (a reading never fails a bench half way).
``connections_into`` counts the established TCP connections a listener holds
(``/proc/net/tcp`` and ``tcp6``): what a fleet costs an apiserver in sockets and TLS sessions.
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


TCP_ESTABLISHED = "01"
"""``st`` of an established connection in ``/proc/net/tcp`` and ``tcp6``."""


def established_into(port: int, tables: Iterable[str]) -> int:
    """How many established TCP connections the listener on ``port`` holds, counted from the
    text of ``/proc/net/tcp`` and ``/proc/net/tcp6`` (the server's end of each: local port
    ``port``, state established; a client's end on the same machine has ``port`` as its
    remote port and is not counted). PURE."""
    count = 0
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != TCP_ESTABLISHED:
                continue
            _, _, local_port = fields[1].rpartition(":")
            try:
                if int(local_port, 16) == port:
                    count += 1
            except ValueError:
                continue
    return count


def connections_into(port: int) -> int:
    """``established_into`` for this machine's network namespace now."""
    tables = []
    for name in ("tcp", "tcp6"):
        try:
            tables.append(pathlib.Path("/proc/net", name).read_text())
        except OSError:
            continue
    return established_into(port, tables)
