"""The discovery agent's ``/metrics``: Akri's agent families by Akri's names, types and label
names (docs/metrics.md), written without ``_created`` and with Akri's bare counter name; what
the agent has beyond them is exactly the additions docs/metrics.md lists."""

from __future__ import annotations

import metrics_support

from discovery import registry
from discovery.agent import metrics


def scrape() -> str:
    agent = metrics.Metrics()
    agent.registry.register(metrics.HandlerEndpoints(lambda: {"debugEcho": 1}))
    agent.set_instances(("default", "cfg"), 1, 2)
    snapshot = registry.Snapshot(version=1, devices=(), endpoints=("e",), reported=frozenset())
    agent.discovery_snapshot(("default", "cfg"), "debugEcho", snapshot, 0.3)
    failed = registry.Snapshot(version=2, errors={"e": "stream ended"})
    agent.discovery_snapshot(("default", "cfg"), "debugEcho", failed, 0.4)
    agent.set_slots("cfg-abcdef", 1, 2)
    agent.discovery_time.labels("default/cfg").observe(0.3)
    return agent.render().decode()


def test_akri_names_types_and_labels_and_only_the_documented_additions() -> None:
    exported = metrics_support.families(scrape())
    akri = metrics_support.doc_table("Akri agent's families")
    additions = metrics_support.doc_table("Akri agent: edgehub's additions")
    process = metrics_support.doc_table("Process families, shared")
    assert len(akri) == 3 and len(additions) == 3
    assert {n: exported.get(n) for n in akri} == akri
    assert {n: v for n, v in exported.items() if n not in akri} == {**additions, **process}


def test_akri_counter_is_bare_and_nothing_has_created() -> None:
    text = scrape()
    assert "# TYPE akri_discovery_response_result counter\n" in text
    assert (
        'akri_discovery_response_result{discovery_handler_name="debugEcho",result="Success"} 1.0\n'
        in text
    )
    assert 'discovery_handler_name="debugEcho",result="Fail"} 1.0\n' in text
    assert 'akri_discovery_response_time_bucket{configuration="default/cfg",le="0.5"} 1.0\n' in text
    assert "_created" not in text and "_total{" not in text.replace("process_cpu_seconds_total", "")


def test_render_writes_a_bare_counter_as_named() -> None:
    from prometheus_client.core import CounterMetricFamily

    counter = CounterMetricFamily("c", "doc", labels=["l"], created=1.0)
    counter.add_metric(['a"b'], 2, created=1.0)
    other = CounterMetricFamily("d", "doc", value=1)
    text = metrics.render([counter, other], frozenset({"c"})).decode()
    assert text == (
        '# HELP c doc\n# TYPE c counter\nc{l="a\\"b"} 2.0\n'
        "# HELP d_total doc\n# TYPE d_total counter\nd_total 1.0\n"
    )
