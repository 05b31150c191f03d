"""discoveryDetails read as Akri's handlers read them (serde_yaml into their structs).

A Configuration that works with Akri's handlers must work with edgehub's: a string field takes
any scalar as its text, unknown keys are ignored (with a warning here), aliases are followed,
booleans and numbers are YAML 1.2 core. Only what Akri refuses is refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from discovery import details
from discovery.handlers import debug_echo, onvif, opcua, udev
from managers import configvalidating as cv


@pytest.mark.parametrize(
    ("text", "descriptions"),
    [
        # serde_yaml deserializes a non-string scalar into a String as its source text.
        ("descriptions: [1, yes, 0x1F, 1.50, ~]", ("1", "yes", "0x1F", "1.50", "~")),
        (
            "descriptions: [null, 'null', true, -0, 1e3, .inf]",
            ("null", "null", "true", "-0", "1e3", ".inf"),
        ),
        ("descriptions: [\"a\\tb\", 'it''s']", ("a\tb", "it's")),
        ("descriptions:\n  - &cam camera\n  - *cam\n", ("camera", "camera")),
        ("base: &list [a, b]\ndescriptions: *list", ("a", "b")),
        ("descriptions:", ()),
        ('{"descriptions": [2, false]}', ("2", "false")),
    ],
)
def test_debug_echo_descriptions_are_the_scalars_text(
    text: str, descriptions: tuple[str, ...]
) -> None:
    assert debug_echo.parse_details(text).descriptions == descriptions


@pytest.mark.parametrize(
    ("text", "warnings"),
    [
        ("descriptions: [a]", ()),
        (
            "descriptions: [a]\ndescriptons: [b]\nnote: 1",
            (
                "descriptons: unknown key, ignored (expected descriptions)",
                "note: unknown key, ignored (expected descriptions)",
            ),
        ),
        # serde_yaml has no merge keys: ``<<`` is an unknown key like any other.
        (
            "x: &m {descriptions: [a]}\n<<: *m\ndescriptions: []",
            ("x: unknown key", "<<: unknown key"),
        ),
    ],
)
def test_unknown_keys_are_accepted_with_a_warning(text: str, warnings: tuple[str, ...]) -> None:
    parsed = debug_echo.parse_details(text)
    assert len(parsed.warnings) == len(warnings)
    for got, expected in zip(parsed.warnings, warnings, strict=True):
        assert got.startswith(expected)


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("", "descriptions", "required"),  # Akri: "" is an error (§9 case 22)
        ("descriptions: ~", "descriptions", "expected a list"),
        ("descriptions: [[a]]", "descriptions[0]", "expected a string"),
        ("descriptions: [{a: b}]", "descriptions[0]", "expected a string"),
        ("descriptions: a", "descriptions", "expected a list"),
    ],
)
def test_debug_echo_refuses_what_akri_refuses(text: str, field: str, message: str) -> None:
    with pytest.raises(details.DetailsError) as caught:
        debug_echo.parse_details(text)
    assert caught.value.field == field
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("udevRules: []\ngroupRecursive: true", True),
        ("udevRules: []\ngroupRecursive: True", True),
        ("udevRules: []\ngroupRecursive: FALSE", False),
        ("udevRules: []", False),
    ],
)
def test_udev_booleans_are_yaml_1_2(text: str, expected: bool) -> None:
    assert udev.parse_details(text).group_recursive is expected


@pytest.mark.parametrize(
    "text",
    [
        # YAML 1.1 booleans are strings in serde_yaml: a bool field refuses them.
        "udevRules: []\ngroupRecursive: yes",
        "udevRules: []\ngroupRecursive: 'true'",
        "udevRules: []\ngroupRecursive: ~",
    ],
)
def test_udev_refuses_booleans_akri_refuses(text: str) -> None:
    with pytest.raises(details.DetailsError, match="groupRecursive: expected true or false"):
        udev.parse_details(text)


def test_udev_rules_and_permissions_take_any_scalar_and_warn_on_unknown_keys() -> None:
    parsed = udev.parse_details("udevRules: ['']\npermissions: rw\nextra: 1")
    assert parsed.permissions == "rw" and type(parsed.permissions) is str
    assert parsed.warnings == (
        "extra: unknown key, ignored (expected groupRecursive, permissions, udevRules)",
    )


@pytest.mark.parametrize(
    ("text", "timeout"),
    [
        ("discoveryTimeoutSeconds: 3", 3.0),
        ("discoveryTimeoutSeconds: 0x0A", 10.0),
        ("discoveryTimeoutSeconds: 0o7", 7.0),
        ("discoveryTimeoutSeconds: +2", 2.0),
        ("discoveryTimeoutSeconds: ~", onvif.DEFAULT_DISCOVERY_TIMEOUT),
    ],
)
def test_onvif_numbers_are_yaml_1_2(text: str, timeout: float) -> None:
    assert onvif.parse_details(text).discovery_timeout == timeout


def test_onvif_refuses_a_quoted_number_and_warns_on_unknown_keys() -> None:
    with pytest.raises(details.DetailsError, match="expected a number"):
        onvif.parse_details("discoveryTimeoutSeconds: '3'")
    parsed = onvif.parse_details("ipAddress: {items: []}\nscopes: {items: [1], extra: x}")
    assert parsed.scopes is not None and parsed.scopes.items == ("1",)
    assert [w.split(":")[0] for w in parsed.warnings] == ["ipAddress", "scopes.extra"]


def test_opcua_method_is_an_enum_and_its_struct_warns() -> None:
    parsed = opcua.parse_details(
        "opcuaDiscoveryMethod:\n  standard:\n    discoveryUrls: ['opc.tcp://h:1/']\n    x: 1\n"
        "discoveryUrls: []"
    )
    assert parsed.discovery_urls == ("opc.tcp://h:1/",)
    assert [w.split(":")[0] for w in parsed.warnings] == [
        "discoveryUrls",
        "opcuaDiscoveryMethod.standard.x",
    ]
    # An unknown variant is an error in serde too.
    with pytest.raises(details.DetailsError, match=r"opcuaDiscoveryMethod\.lds: unknown key"):
        opcua.parse_details("opcuaDiscoveryMethod: {lds: {}}")


def configuration(details_text: str) -> dict[str, Any]:
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"discoveryHandler": {"name": "debugEcho", "discoveryDetails": details_text}},
    }


def test_webhook_admits_unknown_keys_with_a_warning() -> None:
    warnings: list[str] = []
    assert cv.check(configuration("descriptions: [1, yes]\ndescriptons: [b]"), warnings) == []
    assert warnings == [
        "spec.discoveryHandler.discoveryDetails: descriptons: unknown key, ignored "
        "(expected descriptions)"
    ]
