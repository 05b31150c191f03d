"""The hub's ``/metrics`` as YurtHub's Go client writes it (``yurthub.metrics.render``), and
YurtHub v1.7.0's families (docs/metrics.md) all there, with their types and labels."""

from __future__ import annotations

import metrics_support
from prometheus_client import parser
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from yurthub import metrics


def test_a_counter_yurthub_names_bare_is_exported_bare_and_nothing_has_created() -> None:
    hub = metrics.Metrics()
    hub.child(hub.proxy_traffic, "kubelet", "list", "pods", "").inc(42)
    hub.answers.labels("cloud", "kubelet", "list").inc()
    hub.request_duration.labels("kubelet", "list", "pods", "200").observe(0.01)
    text = hub.exposition().decode()
    assert "# TYPE node_yurthub_proxy_traffic_collector counter\n" in text
    assert (
        'node_yurthub_proxy_traffic_collector{client="kubelet",resource="pods",subresources="",'
        'verb="list"} 42.0\n'
    ) in text
    assert "# TYPE node_yurthub_answers_total counter\n" in text
    assert (
        'node_yurthub_answers_total{component="kubelet",source="cloud",verb="list"} 1.0\n'
    ) in text
    assert 'node_yurthub_request_duration_seconds_count{code="200"' in text
    assert "_created" not in text
    assert "proxy_traffic_collector_total" not in text


def test_render_escapes_and_maps_types() -> None:
    gauge = GaugeMetricFamily("g", 'a "doc"\\\nnext', labels=["l"])
    gauge.add_metric(['say "hi"\\\n'], 1.5)
    counter = CounterMetricFamily("c", "a counter", labels=[], created=3.0)
    counter.add_metric([], 2, created=3.0)
    histogram = HistogramMetricFamily("h", "a histogram", labels=[])
    histogram.add_metric([], buckets=[("1.0", 1), ("+Inf", 2)], sum_value=3)
    text = metrics.render([gauge, counter, histogram], bare_counters=frozenset({"c"})).decode()
    assert text == (
        '# HELP g a "doc"\\\\\\nnext\n'
        "# TYPE g gauge\n"
        'g{l="say \\"hi\\"\\\\\\n"} 1.5\n'
        "# HELP c a counter\n"
        "# TYPE c counter\n"
        "c 2.0\n"
        "# HELP h a histogram\n"
        "# TYPE h histogram\n"
        'h_bucket{le="1.0"} 1.0\n'
        'h_bucket{le="+Inf"} 2.0\n'
        "h_count 2.0\n"
        "h_sum 3.0\n"
    )
    # What prometheus_client's parser reads back: the same families and values.
    parsed = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert parsed["g"].samples[0].labels == {"l": 'say "hi"\\\n'}
    assert parsed["c"].samples[0].value == 2.0


def test_every_yurthub_family_is_exported_with_its_type_and_labels() -> None:
    hub = metrics.Metrics()
    # One child of each labelled family, so its label names show in the scrape.
    hub.child(hub.server_healthy_status, "https://a:6443").set(1)
    for family in (hub.in_flight_requests, hub.aggregated_in_flight_requests):
        hub.child(family, "list", "pods", "", "kubelet").inc()
    hub.child(hub.target_for_multiplexer_requests, "list", "pods", "", "kubelet", "a").inc()
    hub.child(hub.closable_conns, "a:6443").set(1)
    hub.child(hub.proxy_traffic, "kubelet", "list", "pods", "").inc(1)
    exported = metrics_support.families(hub.exposition().decode())
    yurthub = metrics_support.doc_table("YurtHub's families")
    assert len(yurthub) == 11
    assert {name: exported.get(name) for name in yurthub} == yurthub
