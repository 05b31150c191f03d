"""Reading kube-apiserver's, a hub's and a hollow kubelet's metrics (``apimetrics``)."""

from __future__ import annotations

import pytest

from yurthub.testing import apimetrics


def sample(name: str, value: float, **labels: str) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{body}}} {value:g}"


def request(code: str, resource: str, verb: str, value: float, sub: str = "") -> str:
    return sample(
        apimetrics.REQUESTS,
        value,
        code=code,
        component="apiserver",
        dry_run="",
        group="",
        resource=resource,
        scope="cluster",
        subresource=sub,
        verb=verb,
        version="v1",
    )


def longrunning(resource: str, verb: str, value: float, scope: str = "cluster") -> str:
    return sample(
        apimetrics.LONGRUNNING,
        value,
        component="apiserver",
        group="",
        resource=resource,
        scope=scope,
        subresource="",
        verb=verb,
        version="v1",
    )


TEXT = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        "# TYPE apiserver_request_total counter",
        request("200", "pods", "LIST", 7),
        request("200", "pods", "PATCH", 5, sub="status"),
        request("429", "pods", "LIST", 2),
        request("200", "leases", "PUT", 100),
        longrunning("services", "WATCH", 3),
        longrunning("services", "WATCH", 1, scope="namespace"),
        longrunning("endpointslices", "WATCH", 2),
        longrunning("pods", "CONNECT", 1),
        "apiserver_longrunning_requests_other 9",
        sample(apimetrics.REST_CLIENT, 30, code="200", host="127.0.0.1:1", method="GET"),
        sample(apimetrics.REST_CLIENT, 4, code="429", host="127.0.0.1:1", method="GET"),
        sample(apimetrics.REST_CLIENT, 1, code="429", host="127.0.0.1:1", method="PUT"),
        'odd_metric{label="with \\"quotes\\" and \\\\ slash"} 1',
        "broken{ 3",
    ]
)


def scrape() -> apimetrics.Scrape:
    return apimetrics.select(
        TEXT,
        (
            apimetrics.REQUESTS,
            apimetrics.LONGRUNNING,
            apimetrics.REST_CLIENT,
            "odd_metric",
            "broken",
        ),
    )


def test_watches_by_resource_leave_other_verbs_and_families_out() -> None:
    s = scrape()
    assert apimetrics.watches(s) == {"services": 4.0, "endpointslices": 2.0}
    assert apimetrics.pool_watches(s) == 6.0


def test_requests_by_verb_resource_and_code() -> None:
    counts = apimetrics.requests(scrape())
    assert counts == {
        ("LIST", "pods", "200"): 7.0,
        ("PATCH", "pods/status", "200"): 5.0,
        ("LIST", "pods", "429"): 2.0,
        ("PUT", "leases", "200"): 100.0,
    }
    assert apimetrics.total(counts) == 114.0
    assert apimetrics.total(counts, code="429") == 2.0
    assert apimetrics.total(counts, verb="LIST") == 9.0
    assert apimetrics.by_verb_resource(counts)[("LIST", "pods")] == 9.0


def test_label_values_are_unescaped_and_broken_lines_skipped() -> None:
    s = scrape()
    assert s.get("odd_metric", label='with "quotes" and \\ slash') == 1.0
    assert s.get("broken") == 0.0


def test_rest_client_codes() -> None:
    assert apimetrics.rest_client_codes(scrape()) == {"200": 30.0, "429": 5.0}


@pytest.mark.parametrize(
    ("before", "after", "want"),
    [
        ({("GET", "x", "200"): 5.0}, {("GET", "x", "200"): 8.0}, {("GET", "x", "200"): 3.0}),
        # A restarted apiserver counts from zero: what it counted since is the growth.
        ({("GET", "x", "200"): 50.0}, {("GET", "x", "200"): 4.0}, {("GET", "x", "200"): 4.0}),
        ({}, {("GET", "x", "200"): 2.0}, {("GET", "x", "200"): 2.0}),
        ({("GET", "x", "200"): 2.0}, {("GET", "x", "200"): 2.0}, {}),
    ],
)
def test_delta(
    before: dict[apimetrics.RequestKey, float],
    after: dict[apimetrics.RequestKey, float],
    want: dict[apimetrics.RequestKey, float],
) -> None:
    assert apimetrics.delta(before, after) == want


@pytest.mark.parametrize(
    ("points", "peak"),
    [
        ([], 0.0),
        ([(0.0, 10.0)], 0.0),
        ([(0.0, 10.0), (1.0, 30.0), (2.0, 35.0)], 20.0),
        ([(0.0, 10.0), (2.0, 30.0)], 10.0),
        ([(0.0, 100.0), (1.0, 40.0), (2.0, 45.0)], 40.0),  # reset: counts from zero
        ([(0.0, 1.0), (0.0, 5.0)], 0.0),  # no time passed: no rate
    ],
)
def test_peak_rate(points: list[tuple[float, float]], peak: float) -> None:
    assert apimetrics.peak_rate(points) == peak


@pytest.mark.parametrize(
    "line",
    ["", "# HELP x y", "x", 'x{a="b"}', 'x{a="b"} notanumber', "x NaN", 'x{a="b" 1'],
)
def test_lines_that_are_no_sample(line: str) -> None:
    assert apimetrics.parse_line(line) is None


def test_a_sample_without_labels() -> None:
    assert apimetrics.parse_line("up 1") == ("up", (), 1.0)
