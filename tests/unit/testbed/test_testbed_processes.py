"""yurthub.testing.processes: a child that must die with its starter, without Python code run
between fork and exec (a preexec_fn in a process with other threads crashed children here)."""

from __future__ import annotations

import pathlib
import threading
import time

from yurthub.testing import processes


def test_a_child_dies_with_the_thread_that_started_it(tmp_path: pathlib.Path) -> None:
    proc = processes.Process(
        "sleeper", ["sleep", "600"], tmp_path / "sleeper.log", die_with_parent=True
    )
    # Other threads alive, as in the test bed (gRPC's, the executor's).
    stop = threading.Event()
    busy = threading.Thread(target=stop.wait, name="busy")
    busy.start()
    starter = threading.Thread(target=proc.start, name="starter")
    starter.start()
    starter.join()  # the starting thread is gone: the kernel kills its child
    try:
        deadline = time.monotonic() + 30
        while proc.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not proc.alive, "the child outlived the thread that started it"
    finally:
        stop.set()
        busy.join()
        proc.stop()


def test_a_child_lives_while_its_starter_does(tmp_path: pathlib.Path) -> None:
    proc = processes.Process(
        "sleeper", ["sleep", "600"], tmp_path / "sleeper.log", die_with_parent=True
    )
    proc.start()
    try:
        assert proc.alive
        assert processes.start_time(proc.pid)  # the command itself: setpriv exec'd it
        assert pathlib.Path(f"/proc/{proc.pid}/exe").resolve().name == "sleep"
    finally:
        proc.stop()
