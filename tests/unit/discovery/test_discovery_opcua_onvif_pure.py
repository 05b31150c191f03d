"""Pure decisions of the OPC UA handler and the shared filter lists (Akri cases 11, 21)."""

from __future__ import annotations

import pytest

from discovery import details, filtering
from discovery.filtering import Action, FilterList
from discovery.handlers import opcua


@pytest.mark.parametrize(
    ("filter_list", "item", "expected"),
    [
        (FilterList(("beep", "bop"), Action.EXCLUDE), "beep", False),
        (FilterList(("beep", "bop"), Action.EXCLUDE), "boop", True),
        (FilterList((), Action.EXCLUDE), "beep", True),
        (FilterList(("beep", "bop"), Action.INCLUDE), "bop", True),
        (FilterList(("beep", "bop"), Action.INCLUDE), "boop", False),
        (FilterList((), Action.INCLUDE), "beep", False),
        (None, "beep", True),
    ],
)
def test_should_include(filter_list: FilterList | None, item: str, expected: bool) -> None:
    assert filtering.should_include(filter_list, item) is expected


def test_filter_parsing() -> None:
    assert filtering.parse({"items": ["a"]}, "f") == FilterList(("a",), Action.INCLUDE)
    assert filtering.parse({"items": [], "action": "Exclude"}, "f") == FilterList(
        (), Action.EXCLUDE
    )
    with pytest.raises(details.DetailsError, match=r"f.action: expected one of Include, Exclude"):
        filtering.parse({"items": [], "action": "Drop"}, "f")
    with pytest.raises(details.DetailsError, match=r"f.items: required"):
        filtering.parse({"action": "Include"}, "f")
    assert not filtering.is_active(FilterList((), Action.EXCLUDE))
    assert filtering.is_active(FilterList((), Action.INCLUDE))


@pytest.mark.parametrize(
    ("text", "urls"),
    [
        ("", ("opc.tcp://localhost:4840/",)),
        ("opcuaDiscoveryMethod: {standard: {}}", ("opc.tcp://localhost:4840/",)),
        ("opcuaDiscoveryMethod: {standard: }", ("opc.tcp://localhost:4840/",)),
        (
            "opcuaDiscoveryMethod: {standard: {discoveryUrls: ['opc.tcp://127.0.0.1:4855/']}}",
            ("opc.tcp://127.0.0.1:4855/",),
        ),
    ],
)
def test_details_defaults(text: str, urls: tuple[str, ...]) -> None:
    assert opcua.parse_details(text).discovery_urls == urls


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        (
            "opcuaDiscoveryMethod: {standard: {discoveryUrls: ['tcp://127.0.0.1:4855/']}}",
            "opcuaDiscoveryMethod.standard.discoveryUrls[0]",
            "scheme must be opc.tcp",
        ),
        (
            "opcuaDiscoveryMethod: {standard: {discoveryUrls: ['opc.tcp://host/']}}",
            "opcuaDiscoveryMethod.standard.discoveryUrls[0]",
            "explicit port",
        ),
        ("opcuaDiscoveryMethod: {lds: {}}", "opcuaDiscoveryMethod.lds", "unknown key"),
        ("applicationNames: {items: x}", "applicationNames.items", "expected a list"),
        ("discoveryUrls: []", "discoveryUrls", "unknown key"),
    ],
)
def test_details_errors(text: str, field: str, message: str) -> None:
    with pytest.raises(details.DetailsError) as caught:
        opcua.parse_details(text)
    assert caught.value.field == field
    assert message in str(caught.value)


def test_server_selection() -> None:
    apps = [
        opcua.Application("A", "Server", ("http://a/", "opc.tcp://10.0.0.1:4840/a")),
        opcua.Application("D", "DiscoveryServer", ("opc.tcp://10.0.0.1:4840/d",)),
        opcua.Application("C", "Client", ("opc.tcp://10.0.0.1:4840/c",)),
        opcua.Application("S", "ClientAndServer", ("opc.tcp://10.0.0.1:4840/s",)),
        opcua.Application("Sim", "Server", ("opc.tcp://OPCTest.invalid:50000/OPCUA/Simluation",)),
        opcua.Application("Empty", "Server", ()),
        opcua.Application("H", "Server", ("http://10.0.0.1/h",)),
    ]
    resolvable = {"10.0.0.1": True, "opctest.invalid": False, "a": True}
    urls = opcua.selected_urls(apps, "opc.tcp://192.168.0.1:50000", None, resolvable)
    assert urls == [
        "opc.tcp://10.0.0.1:4840/a",
        "opc.tcp://10.0.0.1:4840/s",
        "opc.tcp://192.168.0.1:50000/OPCUA/Simluation",
        "http://10.0.0.1/h",
    ]
    names = FilterList(("A", "Sim"), Action.EXCLUDE)
    urls = opcua.selected_urls(apps, "opc.tcp://192.168.0.1:50000", names, resolvable)
    assert urls == ["opc.tcp://10.0.0.1:4840/s", "http://10.0.0.1/h"]


def test_every_duplicate_is_removed() -> None:
    found = opcua.to_devices(["u1", "u2", "u1", "u3", "u2"])
    assert [d.id for d in found] == ["u1", "u2", "u3"]
    assert found[0].properties == {"OPCUA_DISCOVERY_URL": "u1"}
