"""Label and field selector parsing and matching (yurthub.cache.selectors)."""

from __future__ import annotations

import pytest

from yurthub.cache import selectors

LABELS = {"app": "web", "tier": "frontend", "apps.openyurt.io/nodepool": "edge-pool", "n": "5"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app in (web,db)", True),
        ("app in (db)", False),
        ("app notin (db, cache)", True),
        ("app notin (web)", False),
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("tier", True),
        ("missing", False),
        ("!missing", True),
        ("!tier", False),
        ("apps.openyurt.io/nodepool=edge-pool", True),
        ("apps.openyurt.io/nodepool in (cloud-pool)", False),
        ("app=web,tier=frontend", True),
        ("app=web, tier=backend", False),
        ("n>3", True),
        ("n<3", False),
        ("app>3", False),
        ("  app = web  ", True),
        ("app=", False),
        ("x=", False),
        ("app=in", False),
    ],
)
def test_label_selector_matching(text: str, matches: bool) -> None:
    assert selectors.parse_labels(text).matches(LABELS) is matches


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("app in (web", "missing ')'"),
        ("app in web", "expected '('"),
        ("app in ()", "must not be empty"),
        ("app web", "expected one of"),
        ("=web", "expected a label key"),
        ("app=web tier", "expected ',' or end"),
        ("Bad_Prefix/x=1", "prefix must be a DNS subdomain"),
        ("-x=1", "name part"),
        ("app=" + "v" * 64, "invalid label value"),
        ("app=-bad", "invalid label value"),
        ("n>x", "not an integer"),
        ("!", "expected a label key"),
    ],
)
def test_label_selector_errors_name_the_bad_part(text: str, fragment: str) -> None:
    with pytest.raises(selectors.SelectorError) as e:
        selectors.parse_labels(text)
    assert fragment in str(e.value)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("b=2,a=1", "a=1, b==2"),
        ("x in (c,a,b)", "x in (a, b, c)"),
        ("!y,x", "x, !y"),
    ],
)
def test_label_canonical_form_ignores_order_spacing_and_double_equals(a: str, b: str) -> None:
    assert selectors.parse_labels(a).canonical() == selectors.parse_labels(b).canonical()


def test_label_canonical_round_trips() -> None:
    text = "a=1,b!=2,c in (x,y),d notin (z),e,!f"
    parsed = selectors.parse_labels(text)
    assert selectors.parse_labels(parsed.canonical()) == parsed


def test_from_label_selector_object() -> None:
    sel = selectors.from_label_selector(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend"]}],
        }
    )
    assert sel.matches(LABELS)
    assert not sel.matches({"app": "web"})
    assert selectors.from_label_selector(None).matches({})
    with pytest.raises(selectors.SelectorError):
        selectors.from_label_selector({"matchExpressions": [{"key": "a", "operator": "Near"}]})


POD = {
    "metadata": {"name": "p1", "namespace": "default"},
    "spec": {"nodeName": "edge-node-1", "restartPolicy": "Always"},
    "status": {"phase": "Running", "podIP": "10.0.0.1"},
}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("metadata.name=p1", True),
        ("metadata.name==p1", True),
        ("metadata.name!=p1", False),
        ("spec.nodeName=edge-node-1,status.phase=Running", True),
        ("spec.nodeName=edge-node-2", False),
        ("spec.nodeName!=", True),
        ("status.nominatedNodeName=", True),
        ("metadata.namespace=default", True),
    ],
)
def test_field_selector_matching(text: str, matches: bool) -> None:
    fields = selectors.field_values("pods", POD)
    assert selectors.parse_fields(text).matches(fields) is matches


def test_field_selector_name_and_escapes() -> None:
    sel = selectors.parse_fields(r"metadata.name=a\,b,spec.x!=y\=z")
    assert sel.name == "a,b"
    assert sel.requires("spec.x") is None
    assert selectors.parse_fields(sel.canonical()) == sel
    assert selectors.parse_fields("spec.nodeName=n").name is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("nonsense", "has no '=', '==' or '!='"),
        ("=x", "names no field"),
        (r"a=b\q", "invalid escape"),
    ],
)
def test_field_selector_errors(text: str, fragment: str) -> None:
    with pytest.raises(selectors.SelectorError) as e:
        selectors.parse_fields(text)
    assert fragment in str(e.value)


@pytest.mark.parametrize(
    ("resource", "obj", "expected"),
    [
        ("secrets", {"metadata": {"name": "s"}, "type": "Opaque"}, {"type": "Opaque"}),
        (
            "nodes",
            {"metadata": {"name": "n"}, "spec": {"unschedulable": True}},
            {"spec.unschedulable": "true"},
        ),
        ("nodes", {"metadata": {"name": "n"}}, {"spec.unschedulable": "false"}),
        (
            "namespaces",
            {"metadata": {"name": "n"}, "status": {"phase": "Active"}},
            {"status.phase": "Active"},
        ),
        (
            "services",
            {"metadata": {"name": "s"}, "spec": {"clusterIP": "10.96.0.1", "type": "ClusterIP"}},
            {"spec.clusterIP": "10.96.0.1", "spec.type": "ClusterIP"},
        ),
        (
            "jobs",
            {"metadata": {"name": "j"}, "status": {"successful": 2}},
            {"status.successful": "2"},
        ),
        (
            "events",
            {
                "metadata": {"name": "e"},
                "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
                "reason": "Started",
                "source": {"component": "kubelet"},
                "type": "Normal",
            },
            {
                "involvedObject.kind": "Pod",
                "involvedObject.name": "p1",
                "reason": "Started",
                "source": "kubelet",
                "type": "Normal",
            },
        ),
    ],
)
def test_field_values_per_kind(
    resource: str, obj: dict[str, object], expected: dict[str, str]
) -> None:
    values = selectors.field_values(resource, obj)
    assert values["metadata.name"] == obj["metadata"]["name"]  # type: ignore[index]
    assert values["metadata.namespace"] == ""
    for key, value in expected.items():
        assert values[key] == value


def test_supported_fields_and_unsupported() -> None:
    assert "spec.nodeName" in selectors.supported_fields("pods")
    assert selectors.supported_fields("configmaps") == {"metadata.name", "metadata.namespace"}
    sel = selectors.parse_fields("spec.nodeName=x,metadata.name=y")
    assert list(selectors.unsupported("configmaps", sel)) == ["spec.nodeName"]
    assert list(selectors.unsupported("pods", sel)) == []
