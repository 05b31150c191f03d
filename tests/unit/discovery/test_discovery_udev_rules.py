"""udev rule parsing and matching (Akri acceptance cases 15-19), pure table tests."""

from __future__ import annotations

import dataclasses

import pytest

from discovery import details
from discovery.handlers import udev, udev_rules
from discovery.handlers.udev_rules import EnumeratorMatch, Field, Op

# Akri test/example.rules: expected term count, rule.
EXAMPLE_RULES = [
    (1, 'SUBSYSTEM=="video4linux"'),
    (2, 'KERNEL=="video*", ENV{ID_SERIAL}=="?*"'),
    (3, 'ENV{ID_PATH}=="?*", KERNEL=="video*|vbi*", DRIVER=="some driver"'),
    (2, 'TAG=="uaccess",ENV{MAJOR}!=""'),
    (2, 'KERNEL=="video[0-9]", DEVPATH!="/sys/path/to/device"'),
    (2, 'ATTR{idProduct}=="1900", ENV{ID_MM_ERICSSON_MBM}=="1"'),
    (2, 'ATTR{idVendor}=="0bdd", ENV{a name}=="Keyboard that has a mouse"'),
    (2, 'KERNEL=="video[0-9]*", ENV{ID_V4L_CAPABILITIES}==":capture:"'),
    (1, 'SUBSYSTEMS=="pci"'),
    (2, 'ATTRS{idVendor}=="0bdd", DRIVERS!="a driver"'),
    (1, 'TAGS=="uaccess"'),
    (1, 'KERNELS=="card[0-9]*"'),
]

# Akri test/example-unsupported.rules: every line fails.
UNSUPPORTED_RULES = [
    'RUN{builtin}+="uaccess"',
    'LABEL="some label"',
    'GOTO="end"',
    'IMPORT{program}="v4l_id $devnode"',
    'OPTIONS="some options"',
    'OWNER="owner"',
    'GROUP="group"',
    'MODE="mode"',
    'WAIT_FOR="queue/read_q"',
    'ACTION=="this action"',
    'NAME=="another_disk"',
    'SYMLINK+="v4l/by-id/$env{ID_BUS}-$env{ID_SERIAL}-video-index$attr{index}"',
    'TEST{key}=="value',
    'PROGRAM=="some program"',
    'RESULT=="some result"',
    'CONST{key}=="value"',
    'SECLABEL{key}=="value',
    'SYSCTL{key}=="value"',
    'TAG-="uaccess"',
    'TAG+="uaccess"',
    'TAG="uaccess"',
    'TAG:="uaccess"',
]


@pytest.mark.parametrize(("count", "rule"), EXAMPLE_RULES)
def test_example_rules_parse(count: int, rule: str) -> None:
    assert len(udev_rules.parse(rule)) == count


@pytest.mark.parametrize("rule", UNSUPPORTED_RULES)
def test_unsupported_rules_fail(rule: str) -> None:
    with pytest.raises(udev_rules.RuleError):
        udev_rules.parse(rule)


def test_detailed_parse() -> None:
    terms = udev_rules.parse(
        'KERNEL=="video[0-9]*",SUBSYSTEM=="video4linux", ATTR{idVendor}=="05a9"'
    )
    assert [(t.field, t.key, t.op, t.value) for t in terms] == [
        (Field.KERNEL, None, Op.EQ, "video[0-9]*"),
        (Field.SUBSYSTEM, None, Op.EQ, "video4linux"),
        (Field.ATTR, "idVendor", Op.EQ, "05a9"),
    ]
    assert str(terms[2]) == 'ATTR{idVendor}=="05a9"'


@pytest.mark.parametrize("rule", ["", "   "])
def test_empty_rule_has_no_terms(rule: str) -> None:
    assert udev_rules.parse(rule) == ()


@pytest.mark.parametrize(
    ("rule", "column", "message"),
    [
        ('KERNEL=="video[0-9]*", TYPO=="blah"', 24, "unknown field 'TYPO'"),
        (' KERNEL=="v", TYPO=="blah"', 15, "unknown field 'TYPO'"),
        ('KERNEL="video0"', 7, "assignment operator '='"),
        ('TAG+="uaccess"', 4, "assignment operator '+='"),
        ('SUBSYSTEM:="tty"', 10, "assignment operator ':='"),
        ('RUN{x}+="y"', 1, "unsupported field RUN"),
        ('KERNEL == "x"', 7, "no spaces inside a term"),
        ('KERNEL=="x" SUBSYSTEM=="y"', 13, "expected ','"),
        ('KERNEL=="x', 9, "unterminated value"),
        ('ATTR=="x"', 1, "ATTR needs a key"),
        ('KERNEL{k}=="x"', 1, "KERNEL takes no {key}"),
        ('ATTR{}=="x"', 5, "empty {key}"),
        ('DRIVER=="(unclosed"', 10, "invalid regular expression"),
        ('KERNEL!="a[b"', 10, "invalid regular expression"),
        ('KERNEL!="x[a[b]]"', 13, "nested character class"),
        ('KERNEL=="[[:nope:]]"', 11, "invalid glob: unknown character class"),
        ('KERNEL!="' + "x" * 1025 + '"', 10, "at most 1024"),
        (",".join(['KERNEL=="x"'] * 65), 769, "at most 64 terms"),
    ],
)
def test_errors_name_the_column(rule: str, column: int, message: str) -> None:
    with pytest.raises(udev_rules.RuleError) as caught:
        udev_rules.parse(rule)
    assert caught.value.column == column, caught.value
    assert message in str(caught.value)


def test_glob_only_values_are_not_compiled_as_regex() -> None:
    # '*x' is not a valid regex, but KERNEL== is a glob match (enumerator semantics).
    (term,) = udev_rules.parse('KERNEL=="*x"')
    assert term.pattern.kind == "glob"
    assert udev_rules.parse('DRIVER=="x"')[0].pattern.kind == "regex"
    assert udev_rules.parse('KERNEL=="ttyS0", ATTR{x}=="a,b(c)"')[1].value == "a,b(c)"
    assert udev_rules.parse('KERNEL=="x",')[0].value == "x"  # trailing comma as in udev


def test_enumerator_mapping() -> None:
    rule = (
        'SUBSYSTEM=="video4linux", ATTR{someKey}=="1000", KERNEL=="video0", '
        'ENV{ID}=="1", TAG=="some_tag", DEVPATH=="/devices/path"'
    )
    assert udev_rules.enumerator_matches(udev_rules.parse(rule)) == [
        EnumeratorMatch("match_subsystem", ("video4linux",)),
        EnumeratorMatch("match_attribute", ("someKey", "1000")),
        EnumeratorMatch("match_sys_name", ("video0",)),
        EnumeratorMatch("match_property", ("ID", "1")),
        EnumeratorMatch("match_tag", ("some_tag",)),
    ]
    nomatch = udev_rules.parse('SUBSYSTEM!="usb", ATTR{someKey}!="1000"')
    assert udev_rules.enumerator_matches(nomatch) == [
        EnumeratorMatch("match_subsystem", ("usb",), nomatch=True),
        EnumeratorMatch("match_attribute", ("someKey", "1000"), nomatch=True),
    ]
    # udev alternatives cannot be expressed to libudev: evaluated in Python only.
    assert udev_rules.enumerator_matches(udev_rules.parse('KERNEL=="a|b"')) == []


@dataclasses.dataclass
class Dev:
    """Plain device data for the pure matcher."""

    sys_name: str
    devpath: str = "/devices/path/include"
    subsystem: str | None = None
    driver: str | None = None
    props: dict[str, str] = dataclasses.field(default_factory=dict)
    attrs: dict[str, str] = dataclasses.field(default_factory=dict)
    parent: Dev | None = None

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(t for t in self.props.get("TAGS", "").split(":") if t)

    def property(self, key: str) -> str | None:
        return self.props.get(key)

    def attribute(self, key: str) -> str | None:
        return self.attrs.get(key)


def _keep(rule: str, candidates: list[Dev]) -> list[str]:
    terms = udev_rules.parse(rule)
    return [d.sys_name for d in candidates if udev_rules.matches(terms, d)]


def test_remaining_filters_akri_case() -> None:
    rule = (
        'KERNEL!="video0", TAG!="tag_exclude", ENV{ID}!="id_num", TAG!="tag[3-9]", '
        'DEVPATH!="/devices/path/exclude", DRIVER!="exclude"'
    )
    candidates = [
        Dev("mock0", devpath="/devices/path/exclude", driver="include"),
        Dev("mock1", driver="exclude"),
        Dev("mock2", driver="include"),
        Dev("mock3", driver="include", props={"TAGS": "tag3:other:tag2"}),
        Dev("mock4", driver="include"),
        Dev("mock5", driver="include", props={"ID": "id_num"}),
    ]
    assert _keep(rule, candidates) == ["mock2", "mock4"]


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ('DRIVER=="some driver"', []),
        ('DRIVER!="some driver"', ["a", "none"]),
        ('DRIVER=="another driver"', ["a"]),
        ('DRIVER=="another.*"', ["a"]),
        ('DRIVER=="another"', []),  # regex must match the whole value
        ('SUBSYSTEMS=="pci"', ["a"]),
        ('SUBSYSTEMS!="pci"', ["none"]),
        ('ATTRS{idVendor}=="0bdd"', ["a"]),
        ('DRIVERS=="pcieport"', ["a"]),
        ('KERNELS=="0000:00:1.*"', ["a"]),
        ('TAGS=="seat"', ["a"]),
        ('KERNEL=="[an]*"', ["a", "none"]),
        ('KERNEL=="n?ne"', ["none"]),
        ('KERNEL=="a|none"', ["a", "none"]),
        ('KERNEL=="a", KERNEL=="none"', []),  # every term must hold (udev AND)
        ('ENV{MAJOR}!=""', ["a"]),
        ('ATTR{size}=="1*"', ["a"]),
        ('ATTR{size}!="1*"', ["none"]),
    ],
)
def test_matching_table(rule: str, expected: list[str]) -> None:
    parent = Dev(
        "0000:00:1c.0",
        subsystem="pci",
        driver="pcieport",
        attrs={"idVendor": "0bdd"},
        props={"TAGS": ":seat:"},
    )
    with_parent = Dev(
        "a",
        driver="another driver",
        props={"MAJOR": "81"},
        attrs={"size": "100"},
        parent=parent,
    )
    orphan = Dev("none", props={"MAJOR": ""})
    assert _keep(rule, [with_parent, orphan]) == expected


def test_grouping_by_path_components() -> None:
    found = [
        ("/sys/device/parent/child1", "/dev/c1"),
        ("/sys/device/parent/child1/child2", None),
        ("/sys/device/parent", "/dev/p"),
        ("/sys/device/parentsibling", "/dev/s"),  # a string prefix, not a descendant
    ]
    groups = udev.group_members(found, recursive=True)
    assert groups == {
        "/sys/device/parent": [
            ("/sys/device/parent", "/dev/p"),
            ("/sys/device/parent/child1", "/dev/c1"),
            ("/sys/device/parent/child1/child2", None),
        ],
        "/sys/device/parentsibling": [("/sys/device/parentsibling", "/dev/s")],
    }
    assert list(udev.group_members(found, recursive=False)) == sorted(p for p, _ in found)


def test_device_construction_grouped_with_usb_and_vfio() -> None:
    parsed = udev.Details(rules=(), group_recursive=True, permissions="rw")
    groups: dict[str, list[udev.Member]] = {
        "/devices/pci0000:00/0000:00:14.0/usb1/1-1": [
            ("/devices/pci0000:00/0000:00:14.0/usb1/1-1", "/dev/bus/usb/001/010"),
            ("/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/video4linux/video0", "/dev/video0"),
        ],
        "/devices/pci0000:00/0000:00:01.0/0000:01:00.0": [
            ("/devices/pci0000:00/0000:00:01.0/0000:01:00.0", None)
        ],
    }
    iommu = {"/devices/pci0000:00/0000:00:01.0/0000:01:00.0": "7"}
    gpu, cam = udev.build_devices(groups, parsed, "akri.sh/udev-usb-keyboard", iommu)
    assert cam.properties == {
        "UDEV_DEVNODE_0": "/dev/bus/usb/001/010",
        "USB_RESOURCE_AKRI_SH_UDEV-USB-KEYBOARD_0": "1:10",
        "UDEV_DEVNODE_1": "/dev/video0",
        "UDEV_DEVPATH": "/devices/pci0000:00/0000:00:14.0/usb1/1-1",
    }
    assert [(s.host_path, s.permissions) for s in cam.device_specs] == [
        ("/dev/bus/usb/001/010", "rw"),
        ("/dev/video0", "rw"),
    ]
    assert gpu.properties == {
        "UDEV_DEVPATH": "/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
        "PCI_RESOURCE_AKRI_SH_UDEV-USB-KEYBOARD": "0000:01:00.0",
    }
    assert [(s.host_path, s.permissions) for s in gpu.device_specs] == [
        ("/dev/vfio/7", "rwm"),
        ("/dev/vfio/vfio", "rwm"),
    ]


def test_device_construction_ungrouped() -> None:
    parsed = udev.Details(rules=())
    (device,) = udev.build_devices(
        {"/devices/virtual/tty/tty0": [("/devices/virtual/tty/tty0", "/dev/tty0")]}, parsed
    )
    assert device.id == "/devices/virtual/tty/tty0"
    assert device.properties == {"UDEV_DEVNODE": "/dev/tty0", "UDEV_DEVPATH": device.id}
    assert device.device_specs[0].permissions == "rwm"


@pytest.mark.parametrize(
    ("function", "argument", "expected"),
    [
        (
            udev.usb_resource_env,
            "akri.sh/udev-usb-keyboard",
            "USB_RESOURCE_AKRI_SH_UDEV-USB-KEYBOARD",
        ),
        (udev.pci_resource_env, "example.com/my-gpu", "PCI_RESOURCE_EXAMPLE_COM_MY-GPU"),
        (udev.extract_usb_address, "/dev/bus/usb/001/010", ("1", "10")),
        (udev.extract_usb_address, "/dev/bus/usb/1/5", ("1", "5")),
        (udev.extract_usb_address, "/dev/bus/usb/abc/def", None),
        (udev.extract_usb_address, "/dev/ttyUSB0", None),
        (udev.extract_usb_address, "", None),
        (
            udev.extract_pci_address,
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
            "0000:01:00.0",
        ),
        (udev.extract_pci_address, "/sys/devices/pci0000:00/0000:03:00.0", "0000:03:00.0"),
        (udev.extract_pci_address, "/dev/bus/usb/001/010", None),
        (udev.extract_pci_address, "/devices/pnp0/00:00/00:00:0/00:00:0.0/tty/ttyS0", None),
    ],
)
def test_helpers(function: object, argument: str, expected: object) -> None:
    assert callable(function)
    assert function(argument) == expected


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("", "udevRules", "required"),
        ("udevRules: []\npermissions: xyz", "permissions", "a valid permission combination"),
        ("udevRules: ['TYPO==\"x\"']", "udevRules[0]", "column 1: unknown field"),
        ("udevRules: ['KERNEL==\"a\"', 'KERNEL=\"b\"']", "udevRules[1]", "column 7: assignment"),
        ("udevRules: []\ngroupRecursive: yes please", "groupRecursive", "true or false"),
    ],
)
def test_details_errors(text: str, field: str, message: str) -> None:
    with pytest.raises(details.DetailsError) as caught:
        udev.parse_details(text)
    assert caught.value.field == field
    assert message in str(caught.value)


def test_details_defaults() -> None:
    parsed = udev.parse_details("udevRules: []")
    assert (parsed.rules, parsed.group_recursive, parsed.permissions) == ((), False, "rwm")
    parsed = udev.parse_details('{"udevRules": ["SUBSYSTEM==\\"tty\\""], "permissions": "r"}')
    assert parsed.permissions == "r" and len(parsed.rules) == 1
