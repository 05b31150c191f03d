"""Child processes of the test bed: started with their output in a log file, stopped for sure.

Each process runs in a session of its own (its pid is its process group), so stopping it
reaches whatever it forked. ``Record`` is what a later ``edgehub cluster down`` needs to stop
a process it did not start: pid plus the kernel's start time of that pid, so a pid reused by
an unrelated program after a crash is never signalled.

``die_with_parent`` asks the kernel to SIGKILL the child when the starting *thread* exits
(``PR_SET_PDEATHSIG``): use it only from a thread that lives as long as the child should
(pytest's main thread), never from a worker thread. It is set by util-linux's ``setpriv
--pdeathsig``, which then execs the command (same pid), never by a ``preexec_fn``: Python code
in the child of a process with other threads (gRPC's, the executor's) can deadlock or crash
between fork and exec (a segfault in ``threading._after_fork`` was seen here, and looked like
the component crashing with signal 11 and an empty log).

Dangers: log files grow with the component's verbosity; keep ``--v`` low.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any


class ProcessError(RuntimeError):
    """A component did not start or died; the message carries its last log lines."""


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    name: str
    pid: int
    start_time: str
    """Field 22 of ``/proc/<pid>/stat`` when started: tells this process from a later one."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Record:
        return cls(name=str(doc["name"]), pid=int(doc["pid"]), start_time=str(doc["start_time"]))


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone.

    A zombie is gone: it has exited and only waits to be reaped (an orphan's new parent in a
    container may never reap it)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    if len(fields) <= 19 or fields[0] == "Z":
        return None
    return fields[19]


def tail(path: pathlib.Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file (bounded read), or a note that there is none."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError as e:
        return f"(no log: {e})"
    text = data.decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join(text) if text else "(empty log)"


def _dying_with_parent(argv: Sequence[str]) -> list[str]:
    """``argv`` run under ``setpriv --pdeathsig KILL`` (util-linux, on every Debian), which sets
    ``PR_SET_PDEATHSIG`` and execs it; ``ProcessError`` where there is no setpriv."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ProcessError(
            "die_with_parent needs util-linux's setpriv (apt-get install util-linux)"
        )
    return [setpriv, "--pdeathsig", "KILL", "--", *argv]


def _await_exec(popen: subprocess.Popen[bytes], setpriv: str, within: float = 10.0) -> None:
    """Return once ``setpriv`` has set the death signal and exec'd the command (the process's
    executable is no longer setpriv): the starting thread may end only after that, or the
    signal would be set with that thread already gone."""
    deadline = time.monotonic() + within
    wrapper = os.path.realpath(setpriv)
    while popen.poll() is None and time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{popen.pid}/exe") != wrapper:
                return
        except OSError:
            return  # gone, or not ours to read: nothing to wait for
        time.sleep(0.001)


class Process:
    """One component: ``start`` it, ask ``alive``, read its ``log``, ``stop`` it."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: pathlib.Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: pathlib.Path | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._die_with_parent = die_with_parent
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Record:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        argv = _dying_with_parent(self.argv) if self._die_with_parent else self.argv
        with self.log.open("ab") as out:
            self._popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
            )
        if self._die_with_parent:
            _await_exec(self._popen, argv[0])
        return self.record()

    def record(self) -> Record:
        pid = self.pid
        return Record(self.name, pid, start_time(pid) or "")

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise ProcessError(f"{self.name} was never started")
        return self._popen.pid

    @property
    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def failure(self, what: str) -> ProcessError:
        """An error for ``what`` went wrong, with the exit status and the log's last lines."""
        status = "" if self.alive else f" (exited with {self.returncode})"
        return ProcessError(
            f"{self.name} {what}{status}; last lines of {self.log}:\n{tail(self.log)}"
        )

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds; idempotent."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            _signal_group(self._popen.pid, signal.SIGTERM)
            try:
                self._popen.wait(grace)
            except subprocess.TimeoutExpired:
                _signal_group(self._popen.pid, signal.SIGKILL)
                self._popen.wait()
        # Children it forked may outlive it in its group: they go too.
        _signal_group(self._popen.pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL at once (a crash, as the tests need one)."""
        if self._popen is not None and self._popen.poll() is None:
            _signal_group(self._popen.pid, signal.SIGKILL)
            self._popen.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_recorded(records: Sequence[Record], grace: float = 10.0) -> list[str]:
    """Stop processes another program started (``edgehub cluster down``), newest first.

    A record whose pid is gone or now belongs to another program (its start time differs) is
    skipped. Returns the names of the processes that were running and are now stopped.
    """
    stopped: list[str] = []
    for record in reversed(records):
        if not record.start_time or start_time(record.pid) != record.start_time:
            continue
        _signal_group(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while start_time(record.pid) == record.start_time and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal_group(record.pid, signal.SIGKILL)
        stopped.append(record.name)
    return stopped


async def terminate(proc: asyncio.subprocess.Process, grace: float = 10.0) -> None:
    """Stop an asyncio child: SIGTERM, then SIGKILL after ``grace`` seconds; waits for it."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()


def terminate_popen(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """``terminate`` for a ``subprocess.Popen`` child."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def read_announcement(
    stream: asyncio.StreamReader, prefix: str, within: float
) -> dict[str, str]:
    """The ``key=value`` fields of the first line of ``stream`` that starts with ``prefix``
    (``edgehub hub``'s ``EDGEHUB_HUB_LISTENING`` or ``EDGEHUB_HUB_READY``), reading past the
    others; ``ProcessError`` if the stream ends first, ``TimeoutError`` after ``within`` s."""
    async with asyncio.timeout(within):
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise ProcessError(f"the output ended before a line starting with {prefix!r}")
            if line.startswith(prefix + " "):
                return dict(part.split("=", 1) for part in line.split()[1:])


def read_announcement_sync(stream: Any, prefix: str) -> dict[str, str]:
    """``read_announcement`` for a ``subprocess.Popen`` text stream (no timeout: the caller's
    process must end, or print, for it to return)."""
    for line in stream:
        if line.startswith(prefix + " "):
            return dict(part.split("=", 1) for part in line.split()[1:])
    raise ProcessError(f"the output ended before a line starting with {prefix!r}")
