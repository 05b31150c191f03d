"""Go's time.ParseDuration as a table: what Go accepts (and its value in ns), what it refuses."""

from __future__ import annotations

import pytest

from nodeautonomy import durations as d

S = d.SECOND


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("0", 0),
        ("+0", 0),
        ("-0", 0),
        ("0s", 0),
        ("5s", 5 * S),
        ("30s", 30 * S),
        ("1478s", 1478 * S),
        ("-5s", -5 * S),
        ("+5s", 5 * S),
        ("-0s", 0),
        ("5.0s", 5 * S),
        ("5.6s", 5 * S + 600 * d.MILLISECOND),
        ("5.s", 5 * S),
        (".5s", 500 * d.MILLISECOND),
        ("1.0s", S),
        ("1.00s", S),
        ("1.004s", S + 4 * d.MILLISECOND),
        ("1.0040s", S + 4 * d.MILLISECOND),
        ("100.00100s", 100 * S + d.MILLISECOND),
        ("10ns", 10),
        ("11us", 11 * d.MICROSECOND),
        ("12\u00b5s", 12 * d.MICROSECOND),
        ("12\u03bcs", 12 * d.MICROSECOND),
        ("13ms", 13 * d.MILLISECOND),
        ("14s", 14 * S),
        ("15m", 15 * d.MINUTE),
        ("16h", 16 * d.HOUR),
        ("3h30m", 3 * d.HOUR + 30 * d.MINUTE),
        ("10.5s4m", 4 * d.MINUTE + 10 * S + 500 * d.MILLISECOND),
        ("-2m3.4s", -(2 * d.MINUTE + 3 * S + 400 * d.MILLISECOND)),
        ("1h2m3s4ms5us6ns", d.HOUR + 2 * d.MINUTE + 3 * S + 4 * d.MILLISECOND + 5000 + 6),
        ("39h9m14.425s", 39 * d.HOUR + 9 * d.MINUTE + 14 * S + 425 * d.MILLISECOND),
        ("52763797000ns", 52763797000),
        # Go computes fractions through a float (20m exactly); integers floor, 1 ns apart.
        ("0.3333333333333333333h", 20 * d.MINUTE - 1),
        ("9007199254.740993ms", (1 << 53) + 1),
        ("9223372036854775807ns", (1 << 63) - 1),
        ("9223372036854775.807us", (1 << 63) - 1),
        ("9223372036s854ms775us807ns", (1 << 63) - 1),
        ("-9223372036854775808ns", -(1 << 63)),
        ("-9223372036854775.808us", -(1 << 63)),
        ("0.100000000000000000000h", 6 * d.MINUTE),
        ("0.830103483285477580700h", 49 * d.MINUTE + 48 * S + 372539827),
    ],
)
def test_go_accepts(text: str, nanoseconds: int) -> None:
    assert d.parse(text) == nanoseconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("3", 'time: missing unit in duration "3"'),
        ("-", 'time: invalid duration "-"'),
        ("+", 'time: invalid duration "+"'),
        ("s", 'time: invalid duration "s"'),
        (".", 'time: invalid duration "."'),
        ("-.", 'time: invalid duration "-."'),
        (".s", 'time: invalid duration ".s"'),
        ("+.s", 'time: invalid duration "+.s"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("1 h", 'time: unknown unit " h" in duration "1 h"'),
        (" 1h", 'time: invalid duration " 1h"'),
        ("1h ", 'time: unknown unit "h " in duration "1h "'),
        ("1hour", 'time: unknown unit "hour" in duration "1hour"'),
        ("1H", 'time: unknown unit "H" in duration "1H"'),
        ("1h-5m", 'time: unknown unit "h-" in duration "1h-5m"'),
        ("-1h+5m", 'time: unknown unit "h+" in duration "-1h+5m"'),
        ("true", 'time: invalid duration "true"'),
        ("forever", 'time: invalid duration "forever"'),
        ("00", 'time: missing unit in duration "00"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("9223372036854775.808us", 'time: invalid duration "9223372036854775.808us"'),
        ("9223372036854ms775us808ns", 'time: invalid duration "9223372036854ms775us808ns"'),
        ("-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
        ("1" + "0" * 400 + "s", f'time: invalid duration "1{"0" * 400}s"'),
    ],
)
def test_go_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        d.parse(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (1, "1s"),
        (59, "59s"),
        (90, "1m30s"),
        (3600, "1h0m0s"),
        (86461, "24h1m1s"),
        (-90, "-1m30s"),
    ],
)
def test_format_seconds_is_go_duration_string(seconds: int, text: str) -> None:
    assert d.format_seconds(seconds) == text
    assert d.parse(text) == seconds * S
