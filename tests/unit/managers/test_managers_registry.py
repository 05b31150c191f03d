"""``--controllers`` parsing (kube-controller-manager's syntax) and the /readyz rendering."""

from __future__ import annotations

import pytest

from managers import registry, serving

KNOWN = ("csrapprover", "hubleader", "autonomy")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("*", KNOWN),
        ("", None),
        ("csrapprover", ("csrapprover",)),
        ("autonomy, csrapprover", ("csrapprover", "autonomy")),  # known order, spaces ok
        ("*,-hubleader", ("csrapprover", "autonomy")),
        ("-hubleader,*", ("csrapprover", "autonomy")),  # a disable wins wherever it stands
        ("csrapprover,csrapprover", ("csrapprover",)),
        ("-csrapprover", None),
        ("*,-csrapprover,-hubleader,-autonomy", None),
    ],
)
def test_select(spec: str, expected: tuple[str, ...] | None) -> None:
    if expected is None:
        with pytest.raises(registry.UnknownController, match="selects no controller"):
            registry.select(spec, KNOWN)
    else:
        assert registry.select(spec, KNOWN) == expected


@pytest.mark.parametrize("spec", ["nodelifecycle", "*,-nodelifecycle", "csrapprover,Autonomy"])
def test_unknown_names_are_refused_naming_the_known_ones(spec: str) -> None:
    with pytest.raises(registry.UnknownController) as caught:
        registry.select(spec, KNOWN)
    assert "known controllers: csrapprover, hubleader, autonomy" in str(caught.value)


def test_every_registered_controller_is_selected_by_default() -> None:
    assert registry.select("*") == tuple(registry.FACTORIES)
    assert "csrapprover" in registry.FACTORIES


def test_readyz_lists_every_check() -> None:
    status, text = serving.render_checks([("caches", True, ""), ("leader-election", True, "x")])
    assert status == 200
    assert text == "[+]caches ok\n[+]leader-election ok (x)\nreadyz check passed\n"
    status, text = serving.render_checks([("caches", False, "not synced: a"), ("b", True, "")])
    assert status == 503
    assert text.splitlines() == [
        "[-]caches failed: not synced: a",
        "[+]b ok",
        "readyz check failed",
    ]
