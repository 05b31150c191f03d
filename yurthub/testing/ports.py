"""Listening ports for test beds that no outgoing connection can take.

A port picked by binding port 0 is an ephemeral one. Between the pick and the process binding
it, or while a listener is closed to be opened again on the same port (an apiserver restarted,
a link refusing), any outgoing connection on the machine may take it as its local port, and
the bind then fails with EADDRINUSE. Two remedies, one for each case:

- ``Ports``/``free_ports``/``free_port`` pick from [20000, the ephemeral range's start), where
  ``connect()`` never looks, each port checked free and not handed out again for ten minutes
  by any of them, in any process of the user (``Ledger``: a port picked for a process that has
  not bound it yet is free to a check, and a second pick would take it); processes side by
  side each pick from a part of the range (``RANGE_ENV``).
- ``PortHold`` keeps a port bound (``SO_REUSEPORT``, never listening) while its listener comes
  and goes: a bound port is skipped by ``connect()``'s search, and a SYN to it still meets no
  listener and is refused. Listeners on a held port must set ``reuse_port`` too.

Invariant: no port is handed out twice within ``Ledger.hold`` seconds, by one ``Ports`` ever;
``PortHold.close`` gives the port back.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import random
import socket
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from types import TracebackType


class NoPortError(RuntimeError):
    """No free port in the range."""


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


RANGE_ENV = "EDGEHUB_TEST_PORTS"
"""``LOW-HIGH``: the range ``Ports`` picks from by default, when test processes run side by
side (``make test``'s pytest workers, ``tests/conftest.py``): each gets a range of its own, so
two never pick the same port between the check and the bind."""


def default_range() -> tuple[int, int]:
    """[20000, the ephemeral range's start), or ``RANGE_ENV``'s range when it is set and sane."""
    low, high = 20000, ephemeral_low() - 1
    given = os.environ.get(RANGE_ENV, "")
    if given:
        try:
            a, b = (int(part) for part in given.split("-", 1))
        except ValueError:
            raise ValueError(f"{RANGE_ENV}={given!r}: expected LOW-HIGH") from None
        if not 1024 <= a < b < ephemeral_low():
            raise ValueError(f"{RANGE_ENV}={given!r}: not within [1024, {ephemeral_low()})")
        low, high = a, b
    return low, high


def split_range(index: int, count: int, low: int, high: int) -> tuple[int, int]:
    """PURE: the ``index``-th of ``count`` equal parts of [``low``, ``high``], for one of
    ``count`` processes side by side."""
    if not 0 <= index < count:
        raise ValueError(f"part {index} of {count}")
    size = (high - low + 1) // count
    return low + index * size, low + (index + 1) * size - 1


LEDGER_ENV = "EDGEHUB_TEST_PORT_LEDGER"
"""The directory of the ports handed out lately (``Ledger``); by default
``edgehub-test-ports-<uid>`` in the temporary directory."""

HOLD = 600.0
"""Seconds a handed-out port is not handed out again: longer than any test bed takes from
picking its ports to binding them (a listener closed and opened again later holds its port
with ``PortHold``)."""


def still_held(handed_out_at: float, now: float, hold: float) -> bool:
    """PURE: whether a port handed out at ``handed_out_at`` is still promised to its taker."""
    return now - hold < handed_out_at <= now


class Ledger:
    """The ports handed out lately by every ``Ports`` of the user, in any process: one empty
    file a port, its modification time the hand-out, under an exclusive lock
    (``flock``) while a ``Ports`` picks. Bounded: a file per port of the range at most."""

    def __init__(self, directory: pathlib.Path | None = None, hold: float = HOLD) -> None:
        given = os.environ.get(LEDGER_ENV, "")
        default = pathlib.Path(tempfile.gettempdir()) / f"edgehub-test-ports-{os.getuid()}"
        self.directory = directory or (pathlib.Path(given) if given else default)
        self.hold = hold

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = self.directory.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise NoPortError(f"{self.directory}: not a directory of this user's (the port ledger)")
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def held(self, port: int, now: float) -> bool:
        try:
            handed_out_at = (self.directory / str(port)).stat().st_mtime
        except FileNotFoundError:
            return False
        return still_held(handed_out_at, now, self.hold)

    def hand_out(self, port: int, now: float) -> None:
        path = self.directory / str(port)
        path.touch(mode=0o600)
        os.utime(path, (now, now))


class Ports:
    """Ports from [``low``, ``high``] (by default ``default_range``), from a random start,
    each checked free (bound on each of the given addresses), not held by ``ledger`` (by
    default the user's ``Ledger``) and never handed out twice by this object."""

    def __init__(
        self, low: int | None = None, high: int | None = None, ledger: Ledger | None = None
    ) -> None:
        default_low, default_high = default_range()
        self.low = default_low if low is None else low
        self.high = default_high if high is None else high
        if self.high - self.low < 1000:
            raise ValueError(f"no room for ports in [{self.low}, {self.high}]")
        self.ledger = ledger or Ledger()
        self._next = random.randrange(self.low, self.high)
        self._given: set[int] = set()

    def take(self, count: int = 1, addresses: Sequence[str] = ("0.0.0.0",)) -> list[int]:
        return self._hand_out(count, 1, addresses)

    def one(self, addresses: Sequence[str] = ("0.0.0.0",)) -> int:
        return self.take(1, addresses)[0]

    def pair(self, addresses: Sequence[str] = ("0.0.0.0",)) -> int:
        """A port whose next one is handed out with it (a server that finds its second port
        there: swtpm's control port)."""
        return self._hand_out(1, 2, addresses)[0]

    def _hand_out(self, count: int, width: int, addresses: Sequence[str]) -> list[int]:
        """The first ports of ``count`` runs of ``width`` ports side by side, every port of a
        run usable (never given by this picker, not held by the ledger, bindable)."""
        found: list[int] = []
        with self.ledger.locked():
            now = time.time()
            for _ in range(self.high - self.low):
                port = self._next
                self._next = self.low if port + width > self.high else port + 1
                run = range(port, port + width)
                if all(
                    p not in self._given and not self.ledger.held(p, now) and bindable(p, addresses)
                    for p in run
                ):
                    for p in run:
                        self.ledger.hand_out(p, now)
                        self._given.add(p)
                    found.append(port)
                    if len(found) == count:
                        return found
        raise NoPortError(
            f"no {count} free run(s) of {width} port(s) in [{self.low}, {self.high}] "
            f"(ports handed out within {self.ledger.hold:.0f} s are in {self.ledger.directory})"
        )


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now, outside the ephemeral range."""
    return Ports().take(count, (host,))


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now, outside the ephemeral range."""
    return Ports().one((host,))


def closed_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a test's server that is down: outside the ephemeral
    range (no outgoing connection takes it as its local port, nor connects to itself through
    it) and in the ledger (no test bed is handed it for ``HOLD`` seconds)."""
    return Ports().one((host,))


def bindable(port: int, addresses: Sequence[str]) -> bool:
    held: list[socket.socket] = []
    try:
        for address in addresses:
            s = socket.socket(_family(address))
            held.append(s)
            s.bind((address, port))
        return True
    except OSError:
        return False
    finally:
        for s in held:
            s.close()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class PortHold:
    """A port kept bound, never listening, until ``close``: port 0 picks one."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.port: int = sock.getsockname()[1]

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> PortHold:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
