"""A real Prometheus (Debian's ``prometheus``, ``make prometheus-bin``) scrapes a hub, the
discovery agent and edgehub manager on the real control plane, loads the shipped alert rules,
and answers every query of the dashboard and of the alerts with data; a cut link makes
``EdgehubCloudUnreachable`` fire.

How the bed mirrors the chart: with ``prometheus.enabled`` the chart annotates the hub's static
Pod (``prometheus.io/port`` = ``hub.staticPod.metricsPort``, served by the hub's metrics-only
listener ``--metrics-bind-address``), the agent's DaemonSet and the manager's Deployment
(``tests/integration/manifests/test_helm_chart.py`` pins that). A pod-annotation scraper goes
to ``<pod IP>:<annotated port><annotated path>``; here every part runs on loopback, so the
static targets are ``127.0.0.1:<the port each was given>`` with the annotated path. The hub is
scraped on its metrics-only listener, never on the hub server (127.0.0.1:10267).

The rules file is the shipped one with each alert's ``for`` removed, so an alert fires on its
first true evaluation instead of after 10 minutes; the expressions are the shipped ones. An
alert's expression filters (``== 0``, ``> 0``): while it does not fire it is empty by design,
so each is also evaluated with ``bool`` on its comparisons, which keeps every series the
expression sees: that must not be empty (a metric or label the expression names that nobody
exports would leave it empty).

Dangers: Prometheus needs two samples for a ``rate`` and the hub's cache answers exist only
once the link is cut; every check polls with a deadline, none sleeps blindly.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import pathlib
import re
import shutil
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import cluster_support as support
import pytest
import yaml

from discovery.testing import kubelet as sim_kubelet
from yurthub.testing import edgenodes, processes, realcluster

pytestmark = pytest.mark.slow

EDGEHUB = str(pathlib.Path(sys.executable).with_name("edgehub"))
DASHBOARDS = support.REPO / "manifests" / "dashboards"
NODE = "prometheus-node"
NAMESPACE = "edgehub-system"
HELD_WATCHES = 25
"""The hub's --max-long-running-requests-per-client here: one more watch of one client is 429
(the refused-requests panel); far above what the hollow kubelet or kube-proxy hold."""
WATCH = "/api/v1/services?watch=1&timeoutSeconds=60"
# Read online, then answered offline from the disk cache (source="cache"). Not a pool-scoped
# resource: a Service list can come from the pool multiplexer's memory instead (source "hub"),
# which it did once earlier tests of the session had left a pool in the shared cluster.
# The hub reads as the node: manifests/hub/rbac.yaml lets nodes list kube-system's ConfigMaps.
CACHED_LIST = "/api/v1/namespaces/kube-system/configmaps"
WATCHER = "prometheus-bed/1"
_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(\s*bool\b)?")


def dashboard_queries() -> Iterator[tuple[str, str]]:
    board = json.loads((DASHBOARDS / "edgehub.json").read_text())
    for panel in board["panels"]:
        for target in panel["targets"]:
            yield f"panel {panel['title']!r}", target["expr"]


def alert_rules() -> list[dict[str, Any]]:
    rule = yaml.safe_load((DASHBOARDS / "alerts.yaml").read_text())
    return [alert for group in rule["spec"]["groups"] for alert in group["rules"]]


def with_bool(expr: str) -> str:
    """``expr`` with ``bool`` after each comparison outside label matchers and strings.

    PURE."""
    out, depth, quoted = [], 0, False
    i = 0
    while i < len(expr):
        c = expr[i]
        if quoted:
            out.append(c)
            quoted = c != '"' or expr[i - 1] == "\\"
            i += 1
            continue
        if c == '"':
            quoted = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth == 0:
            found = _COMPARISON.match(expr, i)
            if found:
                out.append(found.group(1) + (found.group(2) or " bool"))
                i = found.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def test_with_bool_leaves_matchers_alone() -> None:
    assert with_bool('sum(rate(x{a!="b"}[5m])) > 0 and on (i) y == 1') == (
        'sum(rate(x{a!="b"}[5m])) > bool 0 and on (i) y == bool 1'
    )
    assert with_bool("(max(y) or vector(0)) < 1") == "(max(y) or vector(0)) < bool 1"
    assert with_bool("x - time() < 7 * 86400") == "x - time() < bool 7 * 86400"
    assert with_bool("x >= bool 1") == "x >= bool 1"


class Prometheus:
    def __init__(self, workdir: pathlib.Path, targets: dict[str, int]) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("no prometheus on PATH: run `make prometheus-bin`", pytrace=False)
        workdir.mkdir(parents=True, exist_ok=True)
        rules = {
            "groups": yaml.safe_load((DASHBOARDS / "alerts.yaml").read_text())["spec"]["groups"]
        }
        for group in rules["groups"]:
            for alert in group["rules"]:
                alert.pop("for", None)
        (workdir / "rules.yaml").write_text(yaml.safe_dump(rules))
        config = {
            "global": {
                # A scrape may take over a second on a loaded 2-core machine: a timed-out one
                # is no sample, and a counter seen once has no rate (seen in a full run beside
                # a CPU hog).
                "scrape_interval": "2s",
                "scrape_timeout": "2s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(workdir / "rules.yaml")],
            "scrape_configs": [
                {
                    "job_name": f"edgehub-{part}",
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                }
                for part, port in targets.items()
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        (self.port,) = realcluster.free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = processes.Process(
            "prometheus",
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            workdir / "prometheus.log",
            die_with_parent=True,
        )

    def start(self) -> None:
        self.process.start()
        edgenodes.eventually(
            lambda: edgenodes.http("GET", f"{self.url}/-/ready")[0] == 200,
            30,
            "prometheus ready",
            interval=0.2,
            alive=self._alive,
        )

    def _alive(self) -> None:
        if not self.process.alive:
            raise self.process.failure("is not running")

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            doc = json.loads(answer.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result = data["result"]
        return result if data["resultType"] == "vector" else [result]


def poll(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """``check()`` until truthy; on the deadline, fail naming what it last returned."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s (last: {result!r})"
        time.sleep(0.5)


@contextlib.asynccontextmanager
async def started(process: processes.Process) -> AsyncIterator[processes.Process]:
    process.start()
    try:
        yield process
    finally:
        await asyncio.to_thread(process.stop)


def hold_watches(proxy_port: int, count: int) -> list[http.client.HTTPConnection]:
    """``count`` watches through the hub, each admitted (its headers are back)."""
    held = []
    for _ in range(count):
        conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=10)
        conn.request(
            "GET",
            WATCH,
            headers={"User-Agent": WATCHER},
        )
        held.append(conn)
        response = conn.getresponse()
        assert response.status == 200, response.read()
    return held


def get(proxy_port: int, path: str, user_agent: str = "kubectl/v1.37.2") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=30)
    try:
        conn.request("GET", path, headers={"User-Agent": user_agent})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@pytest.mark.timeout(300)  # a cut, an alert and two samples for every rate, on a loaded machine
async def test_prometheus_scrapes_every_part_and_answers_every_query(
    real_cluster: realcluster.RealCluster, hub_rbac: None, tmp_path: pathlib.Path
) -> None:
    cluster = real_cluster
    for manifest in (
        "crds/configurations.akri.sh.yaml",
        "crds/instances.akri.sh.yaml",
        "discovery/00-namespace.yaml",
        "discovery/agent-rbac.yaml",
        "manager/rbac.yaml",
    ):
        await asyncio.to_thread(
            cluster.kubectl, "apply", "-f", str(support.REPO / "manifests" / manifest)
        )
    await asyncio.to_thread(
        cluster.kubectl, "wait", "--for=condition=Established", "crd/instances.akri.sh",
        "--timeout=30s",
    )  # fmt: skip

    def token(account: str) -> pathlib.Path:
        made = cluster.kubectl("create", "token", account, "-n", NAMESPACE, "--duration=1h")
        return support.token_kubeconfig(
            tmp_path / f"{account}.kubeconfig", cluster.url, made.stdout.strip(), cluster.ca_pem
        )

    agent_port, manager_port, hub_metrics_port = realcluster.free_ports(3)
    manager = processes.Process(
        "manager",
        [
            EDGEHUB, "manager", f"--kubeconfig={token('edgehub-manager')}",
            f"--leader-elect-namespace={NAMESPACE}", "--bind-address=127.0.0.1",
            f"--health-port={manager_port}", "--controllers=csrapprover,brokers,nodewatcher",
        ],
        tmp_path / "manager.log",
        die_with_parent=True,
    )  # fmt: skip
    agent = processes.Process(
        "agent",
        [
            EDGEHUB, "agent", f"--node-name={NODE}", f"--kubeconfig={token('edgehub-agent')}",
            f"--discovery-handlers-directory={tmp_path / 'akri'}",
            f"--device-plugins-dir={tmp_path / 'dp'}", f"--cdi-dir={tmp_path / 'cdi'}",
            f"--pod-resources-socket={tmp_path / 'pr.sock'}", "--embedded-handlers=debugEcho",
            "--metrics-address=127.0.0.1", f"--metrics-port={agent_port}",
            "--settle-seconds=0.5", "--registration-window-seconds=0.5",
        ],
        tmp_path / "agent.log",
        env=dict(os.environ, DEBUG_ECHO_INSTANCES_SHARED="false"),
        die_with_parent=True,
    )  # fmt: skip
    # The hub requests a serving certificate (kubeletcertificate mode): the manager decides
    # its CSR, which the CSR-decision panel shows.
    node = edgenodes.EdgeNode(
        cluster,
        NODE,
        workdir=tmp_path / "node",
        serving_certificate=True,
        hub_args=[
            "--metrics-bind-address=127.0.0.1",
            f"--metrics-port={hub_metrics_port}",
            "--cache-agents=kubectl",
            f"--max-long-running-requests-per-client={HELD_WATCHES}",
            "--heartbeat-interval-seconds=2",
        ],
    )
    configuration = {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": "echo", "namespace": "default"},
        "spec": {
            "discoveryHandler": {"name": "debugEcho", "discoveryDetails": "descriptions: [a]"},
            "capacity": 2,
        },
    }
    await asyncio.to_thread(cluster.kubectl, "apply", "-f", "-", input=json.dumps(configuration))
    prometheus = Prometheus(
        tmp_path / "prometheus",
        {"hub": hub_metrics_port, "agent": agent_port, "manager": manager_port},
    )
    try:
        async with (
            started(manager),
            sim_kubelet.SimKubelet(tmp_path / "dp"),
            started(agent),
        ):
            await asyncio.to_thread(node.start)
            try:
                await asyncio.to_thread(run, prometheus, node, hub_metrics_port)
            finally:
                await asyncio.to_thread(node.stop)
    finally:
        await asyncio.to_thread(prometheus.process.stop)
        await asyncio.to_thread(
            cluster.kubectl, "delete", "node", NODE, "--wait=false", check=False
        )
        await asyncio.to_thread(
            cluster.kubectl, "delete", "configuration", "echo", "--wait=false", check=False
        )


def run(prometheus: Prometheus, node: edgenodes.EdgeNode, hub_metrics_port: int) -> None:
    prometheus.start()
    for job in ("edgehub-hub", "edgehub-agent", "edgehub-manager"):
        poll(
            lambda job=job: [
                s for s in prometheus.query(f'up{{job="{job}"}}') if s["value"][1] == "1"
            ],
            30,
            f"{job} scraped",
        )
    # Online traffic: a list cached for kubectl, and one watch too many for one client (429).
    assert get(node.proxy_port, CACHED_LIST) == 200
    held = hold_watches(node.proxy_port, HELD_WATCHES)
    try:
        assert get(node.proxy_port, WATCH, WATCHER) == 429
    finally:
        for conn in held:
            conn.close()
    # The agent's Instance exists, counted in its metrics, before the cut: it is created
    # through the hub, so a slow start (a busy machine) would otherwise leave the discovery
    # panels without data for the whole outage.
    poll(
        lambda: all(
            prometheus.query(f"sum({m})") for m in ("akri_instance_count", "akri_slot_capacity")
        ),
        60,
        "the agent's Instance counted",
    )
    # Cut the link: the hub's heartbeat fails, the alert fires, reads come from the cache.
    node.cut()
    firing = poll(
        lambda: [
            a
            for a in prometheus.api("alerts")["alerts"]
            if a["labels"]["alertname"] == "EdgehubCloudUnreachable" and a["state"] == "firing"
        ],
        60,
        "EdgehubCloudUnreachable firing",
    )
    assert firing[0]["labels"]["instance"] == f"127.0.0.1:{hub_metrics_port}"
    poll(
        lambda: get(node.proxy_port, CACHED_LIST) == 200,
        30,
        "a list answered from the hub's cache",
    )
    queries = list(dashboard_queries())
    for alert in alert_rules():
        queries.append((f"alert {alert['alert']} (bool)", with_bool(alert["expr"])))
    assert len(queries) >= 25
    empty: dict[str, str] = dict((where, expr) for where, expr in queries)
    deadline = time.monotonic() + 120  # rates need two samples after the first answer
    while empty:
        for where, expr in list(empty.items()):
            if prometheus.query(expr):
                del empty[where]
        if not empty or time.monotonic() >= deadline:
            break
        time.sleep(1)
    assert empty == {}, "queries without data:\n" + "\n".join(f"{w}: {e}" for w, e in empty.items())
    rules = prometheus.api("rules")["groups"]
    unhealthy = [r for g in rules for r in g["rules"] if r.get("health") != "ok"]
    assert unhealthy == []
    assert sum(len(g["rules"]) for g in rules) == len(alert_rules())
