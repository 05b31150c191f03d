"""Pure decisions of the OPC UA handler and the shared filter lists (Akri cases 11, 21)."""

from __future__ import annotations

import pytest

from discovery import details, filtering
from discovery.filtering import Action, FilterList
from discovery.handlers import onvif, onvif_credentials, opcua, wsdiscovery


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
    ("url", "message"),
    [
        ("tcp://127.0.0.1:4855/", "scheme must be opc.tcp"),  # Akri: no FindServers call (§9 21)
        ("opc.tcp://host/", "explicit port"),
    ],
)
def test_malformed_urls_are_skipped_as_akri_skips_them_with_a_warning(
    url: str, message: str
) -> None:
    parsed = opcua.parse_details(
        f"opcuaDiscoveryMethod: {{standard: {{discoveryUrls: ['{url}', 'opc.tcp://h:1/']}}}}"
    )
    assert parsed.discovery_urls == ("opc.tcp://h:1/",)
    (warning,) = parsed.warnings
    assert warning.startswith("opcuaDiscoveryMethod.standard.discoveryUrls[0]: ")
    assert message in warning and "skipped" in warning


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("opcuaDiscoveryMethod: {lds: {}}", "opcuaDiscoveryMethod.lds", "unknown key"),
        ("applicationNames: {items: x}", "applicationNames.items", "expected a list"),
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


# --------------------------------------------------------------------------- ONVIF

MATCH = """<?xml version="1.0" encoding="UTF-8"?>
<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"
  xmlns:a="http://schemas.xmlsoap.org/ws/2004/08/addressing"
  xmlns:d="http://schemas.xmlsoap.org/ws/2005/04/discovery">
 <s:Body><d:ProbeMatches><d:ProbeMatch>
  <a:EndpointReference><a:Address>{address}</a:Address></a:EndpointReference>
  <d:Types>dn:NetworkVideoTransmitter</d:Types>
  <d:Scopes> onvif://www.onvif.org/name/NVT
     onvif://www.onvif.org/hardware/X </d:Scopes>
  <d:XAddrs>http://10.0.0.1/onvif/device_service http://[fe80::1]/onvif/device_service</d:XAddrs>
 </d:ProbeMatch></d:ProbeMatches></s:Body></s:Envelope>"""


@pytest.mark.parametrize(
    ("address", "expected"),
    [("urn:uuid:d", "d"), ("uuid:urn:e", "urn:e"), ("urn:x:uuid:F", "x:uuid:f")],
)
def test_uuid_normalisation(address: str, expected: str) -> None:
    assert wsdiscovery.normalise_uuid(address) == expected
    (match,) = wsdiscovery.parse_probe_matches(MATCH.format(address=address).encode())
    assert match.uuid == expected


@pytest.mark.parametrize(
    ("scopes", "kept"),
    [
        (None, 2),
        (FilterList(("onvif://www.onvif.org/name/NVT",)), 2),
        (FilterList(("onvif://www.onvif.org/name",)), 0),  # prefixes do not match
        (FilterList(("onvif://www.onvif.org/name/NVT",), Action.EXCLUDE), 0),
        (FilterList(("onvif://www.onvif.org/other",), Action.EXCLUDE), 2),
    ],
)
def test_scope_filter(scopes: FilterList | None, kept: int) -> None:
    matches = wsdiscovery.parse_probe_matches(MATCH.format(address="urn:uuid:d").encode())
    assert len(onvif.candidates(matches, scopes)) == kept


def test_only_http_service_urls_are_followed() -> None:
    match = wsdiscovery.ProbeMatch(
        "d", ("ftp://10.0.0.1/x", "http://[broken/x", "https://10.0.0.1/s"), (), ()
    )
    assert onvif.candidates([match], None) == {"https://10.0.0.1/s": "d"}


@pytest.mark.parametrize(
    ("value_filter", "value", "passes"),
    [
        (None, None, True),
        (FilterList(("mock.ip",)), None, False),  # fetch failed + Include -> filtered out
        (FilterList((), Action.EXCLUDE), None, True),
        (FilterList(("x",), Action.EXCLUDE), None, False),
        (FilterList(("00:FC:DA:B1:69:CC",)), "00:fc:da:b1:69:cc", True),
        (FilterList(("00:fc:da:b1:69:cc",), Action.EXCLUDE), "00:FC:DA:B1:69:CC", False),
    ],
)
def test_ip_mac_filters(value_filter: FilterList | None, value: str | None, passes: bool) -> None:
    assert onvif.value_passes(value_filter, value) is passes


def test_device_without_network_info() -> None:
    device = onvif.device_for("http://10.0.0.1/onvif/device_service", "d", None, None)
    assert device.id == "http://10.0.0.1/onvif/device_service-d"
    assert device.properties == {
        "ONVIF_DEVICE_SERVICE_URL": "http://10.0.0.1/onvif/device_service",
        "ONVIF_DEVICE_UUID": "d",
    }


INTERFACES_MANUAL = b"""<?xml version="1.0" encoding="UTF-8"?>
<SOAP-ENV:Envelope xmlns:SOAP-ENV="http://www.w3.org/2003/05/soap-envelope"
 xmlns:tds="http://www.onvif.org/ver10/device/wsdl" xmlns:tt="http://www.onvif.org/ver10/schema">
<SOAP-ENV:Body><tds:GetNetworkInterfacesResponse>
<tds:NetworkInterfaces token="eth0"><tt:Enabled>true</tt:Enabled>
<tt:Info><tt:Name>eth0</tt:Name><tt:HwAddress>00:12:41:5c:a1:a5</tt:HwAddress></tt:Info>
<tt:IPv4><tt:Enabled>true</tt:Enabled><tt:Config>
<tt:Manual><tt:Address>192.168.1.36</tt:Address><tt:PrefixLength>24</tt:PrefixLength></tt:Manual>
<tt:DHCP>false</tt:DHCP></tt:Config></tt:IPv4></tds:NetworkInterfaces>
</tds:GetNetworkInterfacesResponse></SOAP-ENV:Body></SOAP-ENV:Envelope>"""

INTERFACES_DHCP = b"""<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope">
<env:Body><GetNetworkInterfacesResponse xmlns="http://www.onvif.org/ver10/device/wsdl">
<NetworkInterfaces token="NetworkInterfaceToken_1">
<Info xmlns="http://www.onvif.org/ver10/schema"><HwAddress>00:FC:DA:B1:69:CC</HwAddress></Info>
<IPv4 xmlns="http://www.onvif.org/ver10/schema"><Enabled>true</Enabled><Config>
<FromDHCP><Address>10.137.185.208</Address><PrefixLength>24</PrefixLength></FromDHCP>
<DHCP>true</DHCP></Config></IPv4></NetworkInterfaces>
</GetNetworkInterfacesResponse></env:Body></env:Envelope>"""


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (INTERFACES_MANUAL, ("192.168.1.36", "00:12:41:5c:a1:a5")),
        (INTERFACES_DHCP, ("10.137.185.208", "00:FC:DA:B1:69:CC")),
        (b"<a/>", (None, None)),
    ],
)
def test_network_interfaces(reply: bytes, expected: tuple[str | None, str | None]) -> None:
    assert onvif.parse_network_interfaces(reply) == expected


def test_username_token_vector() -> None:
    credential = onvif_credentials.Credential("user", "1234567")
    header = onvif.security_header(credential, b"nonce", "2000-01-01T12:34:56:789Z")
    assert onvif.password_digest(b"nonce", "2000-01-01T12:34:56:789Z", "1234567") == (
        "AGsoQQ+qNJu6Ha7h/QAPoQvYcV0="
    )
    assert ">bm9uY2U=</Nonce>" in header
    assert ">AGsoQQ+qNJu6Ha7h/QAPoQvYcV0=</Password>" in header
    assert "<Username>user</Username>" in header


@pytest.mark.parametrize(
    "reply",
    [
        b"<x",
        b"",
        b'<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]><x>&b;</x>',
        b'<!DOCTYPE x SYSTEM "file:///etc/passwd"><x/>',
        b"<x>&undefined;</x>",
        b"\xff\xfe\x00",
        b"<a>" * 100 + b"</a>" * 99,
    ],
)
def test_malformed_or_hostile_replies_are_xml_errors(reply: bytes) -> None:
    with pytest.raises(wsdiscovery.XmlError):
        wsdiscovery.parse_probe_matches(reply)


def test_replies_without_matches_are_ignored() -> None:
    assert wsdiscovery.matches_from_replies([b"<x", b"<a/>", wsdiscovery.probe_message()]) == []
    probe = wsdiscovery.parse_xml(wsdiscovery.probe_message("uuid:1"))
    assert wsdiscovery.text(wsdiscovery.descendants(probe, "Types")[0]) == (
        "dn:NetworkVideoTransmitter"
    )


def _props(**values: str) -> dict[str, bytes]:
    return {k: v.encode() for k, v in values.items()}


def test_credentials_sources_and_precedence() -> None:
    import base64
    import json

    props = _props(
        device_credential_list=json.dumps(["list1"]),
        list1=json.dumps(
            {
                "AAAA-1": {"username": "u1", "password": "p1"},
                "bbbb-2": {"username": "u2", "password": base64.b64encode(b"p2").decode(),
                           "base64encoded": True},
                "default": {"username": "du"},
            }
        ),
        device_credential_ref_list=json.dumps(["refs"]),
        refs=json.dumps({"cccc-3": {"username_ref": "u3ref", "password_ref": "p3ref"}}),
        u3ref="u3",
        p3ref="p3",
        username_bbbb_2="override",
        password_bbbb_2="p2b",
    )  # fmt: skip
    store = onvif_credentials.load(props)
    assert onvif_credentials.lookup(store, "aaaa-1") == onvif_credentials.Credential("u1", "p1")
    assert onvif_credentials.lookup(store, "BBBB-2") == onvif_credentials.Credential(
        "override", "p2b"
    )
    assert onvif_credentials.lookup(store, "cccc-3") == onvif_credentials.Credential("u3", "p3")
    assert onvif_credentials.lookup(store, "zzzz") == onvif_credentials.Credential("du", None)
    assert "p1" not in repr(store)


def test_bad_credential_properties_are_ignored() -> None:
    props = {
        "device_credential_list": b'["missing", "bad", "binary", "deep"]',
        "bad": b"{not json",
        "deep": b"[" * 5_000 + b"]" * 5_000,  # issue 27 item 6: was a RecursionError
        "binary": b"\xff\xfe",
        "username_default": b"\xff",
    }
    assert onvif_credentials.load(props) == {}


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("discoveryTimeoutSeconds: 0", "discoveryTimeoutSeconds", "between"),
        ("discoveryTimeoutSeconds: soon", "discoveryTimeoutSeconds", "expected a number"),
        ("uuids: {items: [a], action: include}", "uuids.action", "expected one of"),
    ],
)
def test_onvif_details_errors(text: str, field: str, message: str) -> None:
    with pytest.raises(details.DetailsError) as caught:
        onvif.parse_details(text)
    assert caught.value.field == field
    assert message in str(caught.value)


def test_onvif_details_defaults() -> None:
    assert onvif.parse_details("{}") == onvif.Details(discovery_timeout=1.0)
    assert onvif.parse_target("127.0.0.1:3702") == ("127.0.0.1", 3702)
    with pytest.raises(ValueError, match="host:port"):
        onvif.parse_target("127.0.0.1")
