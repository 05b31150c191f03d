"""``edgehub status --history`` and the OUTAGES lines of ``edgehub status`` (pure), from JSON
the hub's own record views make (so the screen and the hub agree on every field)."""

from __future__ import annotations

from typing import Any

import pytest
from edgehub import outagetext, statustext

from yurthub.outages import records

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def at(seconds: float) -> records.Instant:
    """``seconds`` after T0 on both clocks, in one boot."""
    return records.Instant(T0 + seconds, "boot-1", 1000.0 + seconds)


def ended() -> records.Outage:
    o = records.begin(at(0), "1", "refused", "https://a:6443: connection refused")
    o.failed("https://a:6443", "refused", "connection refused")
    for _ in range(7):
        o.answered(("kubelet", "get", "nodes"), "cache", 200)
    o.answered(("kubectl", "list", "configmaps"), "cache", 404)
    o.answered(("kubelet", "create", "serviceaccounts/token"), "cache", 201)
    o.issued(records.Token("apps", "web", "web-0", ("api",), T0 + 5, T0 + 65))
    o.end(at(312), 0)
    o.event = records.POSTED
    return o


def ongoing() -> records.Outage:
    o = records.begin(at(3600), "2", "silent", "https://a:6443: no answer within 2 s")
    o.answered(("kube-proxy", "watch", "services"), "pool", 200)
    o.restarts = 1
    o.flaps, o.flap_seconds = 2, 7.0  # the link came back twice within the flap window
    return o


def document() -> dict[str, Any]:
    now = at(3700)
    return {
        "node": "edge-1",
        "ongoing": records.view(ongoing(), now),
        "outages": [records.view(ongoing(), now), records.view(ended(), now)],
        "limit": 50,
    }


def test_the_history_is_a_table_newest_first_with_the_newest_in_detail() -> None:
    text = outagetext.history(document(), "http://127.0.0.1:10267")
    lines = text.splitlines()
    assert lines[0] == (
        "edgehub hub on node edge-1 (http://127.0.0.1:10267): 2 outages recorded "
        "(the last 50 are kept)"
    )
    header = next(line for line in lines if line.strip().startswith("BEGAN"))
    assert header.split() == [
        "BEGAN",
        "ENDED",
        "LASTED",
        "CAUSE",
        "FLAPS",
        "ANSWERED",
        "REFUSED",
        "TOKENS",
        "EVENT",
    ]
    rows = lines[lines.index(header) + 1 : lines.index(header) + 3]
    ongoing_row = ["2026-01-01T01:00:00Z", "ongoing", "1m40s", "silent", "2", "1", "0", "0", "-"]
    assert rows[0].split() == ongoing_row
    ended_row = ["2026-01-01T00:00:00Z", "2026-01-01T00:05:12Z", "5m12s", "refused", "0", "8", "1"]
    assert rows[1].split() == [*ended_row, "1", "posted"]
    assert "ONGOING OUTAGE  2026-01-01T01:00:00Z, 1m40s: no answer in time (a silent link)" in text
    assert "the hub restarted once during it" in text
    assert (
        "the link came back 2 times within the flap window (up 7s in all, counted in its length)"
    ) in text
    assert "answers by source: pool 1" in text


def test_the_detail_lists_answers_refusals_and_tokens() -> None:
    lines = outagetext.detail_lines(records.view(ended(), at(400)))
    text = "\n".join(lines)
    assert "began with: https://a:6443: connection refused" in text
    assert "failed probes: refused 1" in text
    row = next(line for line in lines if "configmaps" in line)
    assert row.split() == ["kubectl", "list", "configmaps", "0", "1", "(404:", "1)"]
    token = next(line for line in lines if "apps/web" in line)
    issued, expires = "2026-01-01T00:00:05Z", "2026-01-01T00:01:05Z"
    assert token.split() == ["apps/web", "web-0", "api", issued, expires]


def test_no_history_and_no_answer() -> None:
    text = outagetext.history({"node": "n", "outages": [], "limit": 50}, "u")
    assert "0 outages recorded" in text and "none:" in text
    assert outagetext.history(None, "u", "connection refused") == (
        "edgehub hub: no outage history from u: connection refused\n"
    )


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"outages": [{}]},
        {"outages": ["garbage", {"answers": ["x", {}], "tokens": [1, {}], "seconds": "?"}]},
    ],
)
def test_missing_fields_are_dashes_never_a_crash(document: dict[str, Any]) -> None:
    assert outagetext.history(document, "u")


def test_the_status_screen_names_the_ongoing_and_the_last_outage() -> None:
    section = {
        "ongoing": {
            "began": "2026-01-01T01:00:00Z",
            "seconds": 100,
            "causeWords": "no answer in time (a silent link)",
            "answered": 1,
            "refused": 0,
            "flaps": 1,
        },
        "last": {
            "began": "2026-01-01T00:00:00Z",
            "seconds": 312,
            "causeWords": "connection refused",
            "event": "posted",
        },
    }
    hub = {"node": "edge-1", "ready": True, "outages": section}
    text = statustext.render(hub, "u", T0)
    assert (
        "  NOW: the cloud is unreachable since 2026-01-01T01:00:00Z (1m40s): no answer in time "
        "(a silent link); 1 answered locally, 0 refused; the link came back once briefly"
    ) in text
    assert "  last: 2026-01-01T00:00:00Z for 5m12s: connection refused (Event: posted)" in text
    quiet = statustext.render({**hub, "outages": {"ongoing": None, "last": None}}, "u", T0)
    assert "OUTAGES  none recorded" in quiet


def test_a_length_missing_a_reboot_is_shown_as_at_least() -> None:
    o = ended()
    o.unmeasured = 1
    doc = {**document(), "outages": [records.view(o, at(400))]}
    text = outagetext.history(doc, "u")
    row = next(line for line in text.splitlines() if line.startswith("  2026-01-01T00:00:00Z"))
    assert row.split()[2] == "5m12s+"
    assert "  +: at least (the node rebooted during it: its time off is not counted)" in text
    assert "NEWEST OUTAGE  2026-01-01T00:00:00Z, at least 5m12s: connection refused" in text
    section = {"ongoing": None, "last": records.view(o, at(400))}
    assert "  last: 2026-01-01T00:00:00Z for at least 5m12s: " in "\n".join(
        outagetext.status_lines(section)
    )
