"""The router marks each answer with where it came from (``routing.SOURCE``) as a typed
``web.ResponseKey``: aiohttp warns once per process about a plain string key, and under the
suite's ``-W error`` that warning, raised after the answer was written, broke the first
proxied connection of a process (its next keep-alive request: "Server disconnected")."""

from __future__ import annotations

import subprocess
import sys


def test_marking_an_answer_warns_nothing_in_a_fresh_process() -> None:
    script = (
        "from aiohttp import web\n"
        "from yurthub.proxy import routing\n"
        "answer = web.StreamResponse()\n"
        "answer[routing.SOURCE] = 'cloud'\n"
        "assert answer.get(routing.SOURCE, 'hub') == 'cloud'\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
