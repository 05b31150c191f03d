"""Remote-sourced text on ``edgehub status``'s screens (``edgehub.visible``): control characters
and escape sequences replaced visibly, everything else kept; both screens fed hostile
documents print none of them."""

from __future__ import annotations

import copy
import http.server
import threading
import unicodedata
from typing import Any

import pytest
from edgehub import outagetext, statustext, visible
from test_status_outages import document as outage_document
from test_status_text import AGENT, HUB, NOW

ESC = "\x1b"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("connection refused", "connection refused"),
        ("", ""),
        (f"{ESC}[2J{ESC}[Hhello", "\\x1b[2J\\x1b[Hhello"),  # clear the screen, home
        (f"{ESC}]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # set the window title (OSC ... BEL)
        (f"{ESC}P$q\x1b\\", "\\x1bP$q\\x1b\\"),  # a DCS that some terminals answer as input
        ("\x9b31m", "\\x9b31m"),  # a C1 CSI: one byte, the same as ESC [
        ("line\nforged: ok", "line\\nforged: ok"),
        ("a\rb\tc\x00d\x7fe", "a\\rb\\tc\\x00d\\x7fe"),
        ("\u202egnp.exe", "\\u202egnp.exe"),  # a right-to-left override
        ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
        ("para\u2029graph\u2028line", "para\\u2029graph\\u2028line"),
        ("\ud800 lone", "\\ud800 lone"),  # a lone surrogate JSON may carry: print() fails
        ("Köln 東京 🚀 ñ", "Köln 東京 🚀 ñ"),  # other scripts and emoji: as they are
        ("back\\slash \\x1b", "back\\slash \\x1b"),  # already visible: unchanged
        (404, "404"),
    ],
)
def test_text_replaces_what_drives_a_terminal_visibly(raw: object, shown: str) -> None:
    assert visible.text(raw) == shown
    assert visible.text(shown) == shown  # once is enough


def test_every_replaced_character_of_the_first_plane_is_escaped() -> None:
    for code in range(0x10000):
        char = chr(code)
        out = visible.text(char)
        harmful = code < 0x20 or unicodedata.category(char) in {"Cc", "Cf", "Cs", "Zl", "Zp"}
        assert (out != char) is harmful, hex(code)
        assert out.isprintable() or not harmful, hex(code)


def test_tree_escapes_every_string_keys_too_and_keeps_the_rest() -> None:
    doc = {"a\x1b": [f"{ESC}[31m", 1, 2.5, None, True, {"k": "\n"}], "n": 3}
    assert visible.tree(doc) == {
        "a\\x1b": ["\\x1b[31m", 1, 2.5, None, True, {"k": "\\n"}],
        "n": 3,
    }
    deep: Any = "x"
    for _ in range(visible.MAX_DEPTH + 5):
        deep = [deep]
    visible.tree(deep)  # bounded, no recursion error


def hostile(value: Any) -> Any:
    """Every string of a document laced with escape sequences and control characters."""
    if isinstance(value, str):
        return f"{ESC}[2J{value}\n\x07{ESC}]0;title\x07\u202e\x9b"
    if isinstance(value, dict):
        return {k: hostile(v) for k, v in value.items()}
    if isinstance(value, list):
        return [hostile(v) for v in value]
    return value


def assert_clean(screen: str) -> None:
    for line in screen.split("\n"):
        bad = [c for c in line if not c.isprintable()]
        assert bad == [], (bad, line)
    assert ESC not in screen and "\x9b" not in screen and "\u202e" not in screen


def test_the_status_screen_prints_no_control_character_from_the_documents() -> None:
    hub = hostile(copy.deepcopy(HUB))
    hub["outages"] = hostile(
        {
            "ongoing": {"began": "2027-01-15T07:00:00Z", "seconds": 60, "causeWords": "silent"},
            "last": {"began": "x", "seconds": 5, "causeWords": "y", "event": "refused: HTTP 403"},
        }
    )
    hub["servers"][1]["lastError"] = f"{ESC}[1;1H{ESC}[2Kconnection refused"
    screen = statustext.render(
        hub,
        "http://127.0.0.1:10267",
        NOW,
        agent=hostile(copy.deepcopy(AGENT)),
        agent_source="agent http://127.0.0.1:10270",
    )
    assert_clean(screen)
    assert "\\x1b[1;1H\\x1b[2Kconnection refused" in screen  # shown, as text
    assert "refused: HTTP 403" in screen


def test_the_history_screen_prints_no_control_character_from_the_document() -> None:
    doc = hostile(outage_document())
    screen = outagetext.history(doc, "http://127.0.0.1:10267")
    assert_clean(screen)
    assert "\\x1b[2J" in screen
    problem = outagetext.history(None, "u", f"HTTP 403: {ESC}[31mnot you")
    assert_clean(problem)
    assert "HTTP 403: \\x1b[31mnot you" in problem


def test_a_refusal_from_the_hub_is_shown_with_its_reason_visibly() -> None:
    """``edgehub status`` run where the hub refuses it (not loopback): the 403's words, not
    a guess at an older hub; an escape sequence in them shows as text."""
    from edgehub import status

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"/v1/status answers callers on this node only {ESC}[2J\nsecond".encode()
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing) as server:
        thread = threading.Thread(target=server.serve_forever, name="refusing-hub")
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            found = status.collect(url, "")
        finally:
            server.shutdown()
            thread.join()
    assert found["hub"] is None
    assert found["hub_problem"].startswith("HTTP 403: /v1/status answers callers on this node")
    screen = status.screen(found)
    assert_clean(screen)
    assert "on this node only \\x1b[2J" in screen and "second" not in screen
