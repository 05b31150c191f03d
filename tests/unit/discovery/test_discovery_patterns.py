"""User patterns on RE2: regex dialect checks, glob semantics against glibc's fnmatch(3)."""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys
import textwrap

import pytest

from discovery import patterns

_libc = ctypes.CDLL(ctypes.util.find_library("c"))
_libc.fnmatch.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int)


def glibc_fnmatch(pattern: str, value: str) -> bool:
    """What libudev's enumerator decides (fnmatch with no flags)."""
    return _libc.fnmatch(pattern.encode(), value.encode(), 0) == 0


GLOB_CASES = [
    ("video*", ["video0", "video", "vide", "xvideo0", "video/x"]),
    ("?*", ["", "a", "ab"]),
    ("tty[0-9]", ["tty0", "tty9", "ttya", "tty10"]),
    ("tty[!0-9]", ["tty0", "ttya", "tty-"]),
    ("tty[^0-9]", ["tty0", "ttya"]),
    ("[]a]", ["]", "a", "b"]),
    ("[!]a]", ["]", "b"]),
    ("[a-]", ["a", "-", "b"]),
    ("[z-a]x", ["zx", "ax", "x"]),
    ("[[:digit:]x]", ["1", "x", "y"]),
    ("[[:upper:]]*", ["Abc", "abc"]),
    ("a\\*b", ["a*b", "axb"]),
    ("[\\]]", ["]", "\\"]),
    ("a[b", ["a[b", "ab"]),
    ("*.*", ["a.b", "ab", ".", "a.b.c"]),
    ("(x)+$^{1}", ["(x)+$^{1}", "xx"]),
    ("é*", ["été", "e"]),
    ("0000:00:1.*", ["0000:00:1c.0", "0000:00:2c.0"]),
    ("*a*a*a*a*a*a*a*a*b", ["a" * 200, "a" * 50 + "b"]),
]


@pytest.mark.parametrize(("pattern", "values"), GLOB_CASES)
def test_globs_match_exactly_what_glibc_fnmatch_matches(pattern: str, values: list[str]) -> None:
    compiled = patterns.glob(pattern)
    for value in values:
        assert compiled.fullmatch(value) == glibc_fnmatch(pattern, value), (pattern, value)


def test_glob_alternatives_are_udevs() -> None:
    compiled = patterns.glob("video*|vbi*")
    assert [compiled.fullmatch(v) for v in ("video0", "vbi1", "radio0")] == [True, True, False]


@pytest.mark.parametrize(
    ("pattern", "offset", "message"),
    [
        ("[[=a=]]", 1, "[=a=] is not supported in a glob"),
        ("a\\", 1, "a glob cannot end in a lone backslash (write \\\\)"),
        ("x[[:nope:]]", 2, "unknown character class [:nope:]"),
    ],
)
def test_glob_errors(pattern: str, offset: int, message: str) -> None:
    with pytest.raises(patterns.PatternError) as caught:
        patterns.glob(pattern)
    assert (caught.value.offset, caught.value.message) == (offset, message)


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        ("video[0-9]*", ["video", "video0", "video12"], ["radio0"]),  # a regex, as in Akri
        ("another.*", ["another driver"], ["other"]),
        ("a|b", ["a", "b"], ["ab"]),
        ("[[:alpha:]]+", ["abc"], ["a1"]),
        (r"\d{2}", ["12"], ["1", "123"]),
        (r"\x{41}", ["A"], ["B"]),
        (r"[^]a]x", ["bx"], ["]x", "ax"]),
        ("(?i)abc", ["ABC"], ["abd"]),
        ("a.c", ["abc"], ["a\nc"]),
    ],
)
def test_regex_dialect(pattern: str, matching: list[str], not_matching: list[str]) -> None:
    compiled = patterns.regex(pattern)
    assert [compiled.fullmatch(v) for v in matching] == [True] * len(matching)
    assert [compiled.fullmatch(v) for v in not_matching] == [False] * len(not_matching)


@pytest.mark.parametrize(
    ("pattern", "offset", "message"),
    [
        # RE2 would read these with another meaning than the Rust regex crate (Akri): refused.
        ("[a[bc]]", 2, "nested character class in the class at offset 0"),
        ("[a-z&&[^x]]", 4, "set operation '&&'"),
        ("[a-z--b]", 4, "set operation '--'"),
        ("x[a~~b]", 3, "set operation '~~'"),
        (r"\C", 0, r"\C (any byte)"),
        (r"\u0041", 0, r"\u escapes are not supported"),
        # Compile errors (RE2's words), also for Python-only syntax the old matcher took.
        ("(unclosed", 0, "missing )"),
        (r"(a)\1", 0, "invalid escape sequence"),
        ("a(?=b)", 0, "invalid"),
        ("a{1001}", 0, "invalid repetition size"),
        (r"(\pL|\pN){1000}", 0, "too large once compiled"),
        ("x" * 1025, 0, "1025 bytes long; at most 1024"),
        ("\ud800", 0, "not valid Unicode"),
    ],
)
def test_regex_refusals(pattern: str, offset: int, message: str) -> None:
    with pytest.raises(patterns.PatternError) as caught:
        patterns.regex(pattern)
    assert caught.value.offset == offset
    assert message in caught.value.message


def test_values_that_are_not_valid_unicode_do_not_raise() -> None:
    # pyudev decodes sysfs with surrogateescape.
    assert patterns.regex("a.*").fullmatch("a\udcff") is True
    assert patterns.glob("a*").fullmatch("a\udcff") is True


def test_classes_are_not_confused_by_posix_names_or_escapes() -> None:
    assert patterns.regex(r"[[:digit:]\]]+").fullmatch("1]2")
    assert patterns.regex(r"[\[a]").fullmatch("[")


def test_equal_when_kind_and_source_are() -> None:
    assert patterns.regex("a*") == patterns.regex("a*")
    assert patterns.regex("a*") != patterns.glob("a*")


def test_a_pathological_udev_rule_matches_in_linear_time() -> None:
    # On Python's backtracking ``re`` this rule takes time exponential in the value's length
    # (issue 14: seconds per device, the event loop frozen meanwhile). A subprocess with a
    # deadline, because a backtracking match holds the GIL and no in-process timeout fires.
    code = textwrap.dedent(
        """
        import types
        from discovery.handlers import udev_rules
        terms = udev_rules.parse('DEVPATH!="(.|.)*!", KERNEL!="(a|aa)*b"')
        device = types.SimpleNamespace(
            devpath="/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/" + "x" * 4000,
            sys_name="a" * 4000,
        )
        print(udev_rules.matches(terms, device))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.strip() == "True"
