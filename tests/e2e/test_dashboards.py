"""Every query of the Grafana dashboard and of the alerts (``manifests/dashboards/``) is
checked against what the binaries really export: a hub, a discovery agent and edgehub manager
run against the simulated apiserver, get some traffic, and are scraped; each metric a query
names must be one of theirs, and each label it matches on, groups by or shows in an annotation
must be one their samples carry (``instance``/``job`` are Prometheus' own)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import csr_support as cs
import pytest
import yaml

from yurthub import metrics
from yurthub.testing import fixtures, simapiserver

REPO = pathlib.Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "manifests" / "dashboards"
EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
PROMETHEUS_LABELS = {"instance", "job"}
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "le", "inf", "nan",
}  # fmt: skip
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")
pytestmark = pytest.mark.slow


# --- reading PromQL (just enough: selectors, grouping, metric names) -------------------------


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names matched) for every ``metric{...}``."""
    out = []
    for name, inside in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", expr):
        out.append((name, set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", inside))))
    return out


def grouping_labels(expr: str) -> set[str]:
    found: set[str] = set()
    for clause in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        found |= {x.strip() for x in clause.split(",") if x.strip()}
    return found


def metric_names(expr: str) -> set[str]:
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}", "", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    bare = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", bare)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare):
        rest = bare[match.end() :].lstrip()
        word = match.group(0)
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue  # a function, or an operator word
        if re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    return names


def queries() -> Iterator[tuple[str, str, set[str]]]:
    """(where, expr, labels its text shows: legends, annotations)."""
    board = json.loads((DASHBOARDS / "edgehub.json").read_text())
    for panel in board["panels"]:
        for target in panel["targets"]:
            shown = set(re.findall(r"\{\{\s*([a-zA-Z_]+)\s*\}\}", target.get("legendFormat", "")))
            yield f"panel {panel['title']!r}", target["expr"], shown
    rule = yaml.safe_load((DASHBOARDS / "alerts.yaml").read_text())
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            text = " ".join(str(v) for v in alert.get("annotations", {}).values())
            shown = set(re.findall(r"\$labels\.([a-zA-Z_]+)", text))
            yield f"alert {alert['alert']}", alert["expr"], shown


def test_the_promql_reader_itself() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, component) (rate(x_bucket{verb!="watch"}[5m])))'
        " and on (instance) max(y) == 0 or vector(0) < 7 * 86400 - time()"
    )
    assert metric_names(expr) == {"x_bucket", "y"}
    assert selectors(expr) == [("x_bucket", {"verb"})]
    assert grouping_labels(expr) == {"le", "component", "instance"}


# --- the binaries ---------------------------------------------------------------------------


class Running:
    def __init__(self, name: str, argv: list[str], log: pathlib.Path, **env: str) -> None:
        self.name, self.log = name, log
        self._err = log.open("wb")
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env={**os.environ, **env},
        )

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log.read_text())
            if found:
                return found
            assert self.proc.poll() is None, f"{self.name} exited: {self.log.read_text()[-2000:]}"
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: no {pattern!r} in {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


def exported(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """(family and sample names, labels per sample name)."""
    names: set[str] = set()
    labels: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            name = name.split()[0]
            names.add(name)
            found = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', rest)) if rest else set()
            labels.setdefault(name, set()).update(found)
    return names, labels


def _watch_in_flight(metrics_text: str) -> bool:
    return any(
        line.startswith("node_yurthub_in_flight_requests_collector{")
        and 'verb="watch"' in line
        and line.endswith(" 1.0")
        for line in metrics_text.splitlines()
    )


def _get(url: str, user_agent: str) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": user_agent})
    with urllib.request.urlopen(request, timeout=10) as resp:
        resp.read()


@pytest.fixture
def scraped(tmp_path: pathlib.Path) -> Iterator[tuple[set[str], dict[str, set[str]]]]:
    with simapiserver.SimApiserverThread(workdir=tmp_path / "sim") as thread:
        sim = thread.sim
        kubeconfig = str(sim.kubeconfig_path)
        for crd in ("configurations.akri.sh.yaml", "instances.akri.sh.yaml"):
            subprocess.run(
                [fixtures.KUBECTL, "--kubeconfig", kubeconfig, "apply", "-f",
                 str(REPO / "manifests" / "crds" / crd)],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
        running: list[Running] = []
        try:
            hub = Running(
                "hub",
                [
                    EDGEHUB, "hub", f"--server-addr={sim.url}", "--node-name=edge-1",
                    f"--kubeconfig={kubeconfig}", f"--disk-cache-path={tmp_path / 'cache'}",
                    "--proxy-port=0", "--serve-port=0", "--proxy-secure-port=0",
                    "--cache-agents=kubectl", "--max-long-running-requests-per-client=1",
                ],
                tmp_path / "hub.log",
            )  # fmt: skip
            running.append(hub)
            assert hub.proc.stdout is not None
            line = hub.proc.stdout.readline().decode()
            fields = dict(p.split("=", 1) for p in line.split()[1:])
            base = tmp_path / "agent"
            base.mkdir()
            agent = Running(
                "agent",
                [
                    EDGEHUB, "agent", "--node-name=edge-1", f"--kubeconfig={kubeconfig}",
                    f"--discovery-handlers-directory={base / 'akri'}",
                    f"--device-plugins-dir={base / 'dp'}", f"--cdi-dir={base / 'cdi'}",
                    f"--pod-resources-socket={base / 'pr.sock'}",
                    "--embedded-handlers=debugEcho", "--metrics-address=127.0.0.1",
                    "--metrics-port=0",
                ],
                tmp_path / "agent.log",
                DEBUG_ECHO_INSTANCES_SHARED="false",
            )  # fmt: skip
            running.append(agent)
            manager = Running(
                "manager",
                [
                    EDGEHUB, "manager", f"--kubeconfig={kubeconfig}", "--leader-elect=false",
                    "--bind-address=127.0.0.1", "--health-port=0",
                    "--controllers=csrapprover,brokers,nodewatcher",
                ],
                tmp_path / "manager.log",
            )  # fmt: skip
            running.append(manager)
            agent_port = agent.wait_for(r"agent metrics on http://[0-9.]+:(\d+)/metrics").group(1)
            manager_port = manager.wait_for(r"/metrics on [0-9.]+:(\d+)").group(1)
            # Traffic, so labelled families have samples: reads through the hub, a
            # Configuration for the agent (devices, a handler) and the manager (reconciles).
            for path in ("/api/v1/pods", "/api/v1/namespaces/default/configmaps"):
                _get(fields["proxy"] + path, "kubectl/v1.37")
            sim.state.create(
                {
                    "apiVersion": "akri.sh/v0",
                    "kind": "Configuration",
                    "metadata": {"name": "echo", "namespace": "default"},
                    "spec": {
                        "discoveryHandler": {
                            "name": "debugEcho",
                            "discoveryDetails": "descriptions: [a]",
                        },
                        "capacity": 1,
                    },
                }
            )
            # A hub CSR for the manager to decide, and a watch too many for one client (429).
            sim.state.create(
                cs.csr(
                    "hub-client", cs.hub_client_request("edge-1"),
                    "kubernetes.io/kube-apiserver-client",
                    ["digital signature", "client auth"],
                    username="system:node:edge-1", groups=["system:nodes", "system:authenticated"],
                )
            )  # fmt: skip
            watch = fields["proxy"] + "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=5"
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                held = pool.submit(_get, watch, "kubectl/v1.37")
                # The first watch is in the hub (its in-flight gauge says so) before the second.
                deadline = time.monotonic() + 10
                while not _watch_in_flight(scrape(fields["server"] + "/metrics")):
                    assert not held.done(), held.exception()
                    assert time.monotonic() < deadline, "the first watch never reached the hub"
                    time.sleep(0.05)
                with pytest.raises(urllib.error.HTTPError) as refused:
                    _get(watch, "kubectl/v1.37")
                with refused.value:  # its response holds the connection
                    assert refused.value.code == 429
                held.result()
            urls = {
                "hub": fields["server"] + "/metrics",
                "agent": f"http://127.0.0.1:{agent_port}/metrics",
                "manager": f"http://127.0.0.1:{manager_port}/metrics",
            }
            wanted = (
                "akri_instance_count{",
                "edgehub_agent_discovery_handler_endpoints{",
                'edgehub_manager_reconciles_total{controller="brokers"',
                'node_yurthub_answers_total{component="kubectl",source="cloud",verb=',
                'node_yurthub_certificate_expiration_timestamp_seconds{certificate="client"}',
                "node_yurthub_rejected_requests_total{",
                'edgehub_manager_csr_decisions_total{decision="approved"',
            )
            deadline = time.monotonic() + 30
            while True:
                text = "\n".join(scrape(url) for url in urls.values())
                missing = [w for w in wanted if w not in text]
                if not missing:
                    break
                assert time.monotonic() < deadline, f"never exported: {missing}"
                time.sleep(0.3)
            yield exported(text)
        finally:
            for process in reversed(running):
                process.stop()


def test_every_query_names_exported_metrics_and_labels(
    scraped: tuple[set[str], dict[str, set[str]]],
) -> None:
    names, labels = scraped
    problems: list[str] = []
    checked = 0
    for where, expr, shown in queries():
        used = metric_names(expr)
        assert used, f"{where}: no metric in {expr!r}"
        families: set[str] = set()
        for name in used:
            checked += 1
            if not any(name + s in names or name.removesuffix(s) in names for s in SUFFIXES):
                problems.append(f"{where}: {name} is not exported")
                continue
            families.add(name)
        carried = set(PROMETHEUS_LABELS)
        for name in families:
            carried |= labels.get(name, set())
        for name, matched in selectors(expr):
            have = labels.get(name, set()) | PROMETHEUS_LABELS
            problems += [f"{where}: {name} has no label {m!r}" for m in sorted(matched - have)]
        for label in sorted((grouping_labels(expr) | shown) - carried):
            problems.append(f"{where}: no metric of {sorted(families)} carries {label!r}")
    assert problems == [], "\n".join(problems)
    assert checked >= 25


def test_the_answer_sources_are_the_ones_queried() -> None:
    values: set[str] = set()
    for _where, expr, _shown in queries():
        values |= set(re.findall(r'source="([^"]*)"', expr))
    assert values and values <= set(metrics.SOURCES)


def test_the_alerts_cover_the_operator_cases() -> None:
    rule: dict[str, Any] = yaml.safe_load((DASHBOARDS / "alerts.yaml").read_text())
    alerts = {a["alert"] for g in rule["spec"]["groups"] for a in g["rules"]}
    assert {
        "EdgehubCloudUnreachable",
        "EdgehubCacheWriteErrors",
        "EdgehubCertificateExpiresSoon",
        "EdgehubManagerLeaderLost",
        "EdgehubDiscoveryHandlerGone",
    } <= alerts
