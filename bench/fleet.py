"""Benchmark: a fleet of edge nodes on the real control plane: no hub, edgehub and YurtHub v1.7.0
side by side, at steady state and in reconnect storms, and a model to 10,000 nodes.

    .venv/bin/python bench/fleet.py [--quick] [--nodes N] [--pools P] [--json PATH]
        [--modes direct,edgehub,yurthub] [--storms cut,apiserver-restart,compacted,leaders-killed]
        [--cut-seconds S] [--outage-seconds S] [--workdir DIR]

Needs the test bed (``make cluster-bins``) and YurtHub (``make yurthub-bin``, for mode
``yurthub``). ``make bench`` runs it with ``--quick``. Loopback only.

The fleet (``yurthub.testing.fleets``): N kubemark hollow nodes (kubelet + kube-proxy) named
after loopback addresses, in P NodePools with leader election, each node behind its own edge
link (``edgehub partition``, which counts the bytes it relays) and, per mode, no hub
(``direct``: the node's client certificate straight through its link), ``edgehub hub`` or
YurtHub, all set up as docs/pool.md says (the hubs' pool facts: ``--nodepool-name``,
``--node-ip``, one multiplexer port, ``leader-hub-<pool>`` written by ``edgehub manager``'s
hub-leader controllers, which stand in for yurt-manager's for YurtHub too), nodes marked
autonomous. The load (``fleetplans``): ``--pods-per-node`` pods (Deployments placed by the
scheduler, "run" by the hollow kubelets), ``--services`` Services with their EndpointSlices,
ConfigMaps and Secrets mounted by the pods. The modes run one after the other on the same
control plane, the same nodes and the same pods; the control plane alone is measured first.

Printed, per mode, with ratios edgehub/direct and edgehub/YurtHub:

- steady state (one window, no scraping inside it): the apiserver's open watches by resource
  (``apiserver_longrunning_requests``), its request rate by verb and resource
  (``apiserver_request_total``), bytes over all edge links, the apiserver's and etcd's CPU and
  RSS, each hub's, kubelet's, kube-proxy's (and the links') CPU in millicores and RSS, the
  followers reading the cloud, 429s answered to the kubelets;
- storms (``fleetstorms.Storm``): every link cut and healed at once; kube-apiserver
  restarted; watches too old to resume (links cut, etcd compacted and the apiserver restarted
  meanwhile, so its watch cache starts at the compacted revision: 410 Gone); every pool's
  leader hub killed at once and restarted. For each: the peak request rate (``/metrics``
  sampled every second), 429s (apiserver, APF, kubelets), the seconds until every node is Ready,
  every hub's cache equals the apiserver (object by object) and the pool-scoped watches are
  back, pods evicted (UIDs gone), leader changes, followers on the cloud, the fleet nodes'
  LISTs after the recovery began (the apiserver's audit log: relists = resourceVersion unset
  or 0);
- the cost per node, which resource bounds N here, and the model to 10,000 nodes in 100
  pools with 300,000 pods (``fleetmodel``), each figure marked measured or extrapolated.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from yurthub.testing import (
    fleetaudit,
    fleetmeasures,
    fleetmodel,
    fleets,
    fleetstorms,
    k8sbinaries,
    realcluster,
)

HERE = pathlib.Path(__file__).resolve().parent
Storm = fleetstorms.Storm


@dataclasses.dataclass(frozen=True)
class Settings:
    nodes: int
    pools: int
    pods_per_node: int
    services: int
    steady: float
    settle: float
    pooling: float
    """The most a hub mode is given after its start for every follower to read its leader
    (YurtHub moves a watch to a new source only when it is re-established: 5-10 min)."""
    cut: float
    outage: float
    leaders_down: float
    deadline: float


FULL = Settings(
    30, 3, 30, 200, steady=120, settle=60, pooling=660, cut=300, outage=120, leaders_down=20,
    deadline=300,
)  # fmt: skip
QUICK = Settings(
    6, 2, 10, 50, steady=30, settle=20, pooling=240, cut=75, outage=60, leaders_down=15,
    deadline=180,
)  # fmt: skip


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def yurthub_binary() -> str | None:
    found = subprocess.run(
        [sys.executable, str(HERE / "yurthub" / "build.py"), "--print-path"],
        capture_output=True,
        text=True,
        check=False,
    )
    path = found.stdout.strip()
    return path if found.returncode == 0 and path and os.access(path, os.X_OK) else None


# --- running -----------------------------------------------------------------------------------


def settle(fleet: fleets.Fleet, s: Settings) -> float | None:
    """Let a freshly started mode reach its steady state: leaders known, every follower on its
    leader (at most ``s.pooling`` seconds), then ``s.settle`` seconds more. Returns the seconds
    until the followers all read their leaders (None: not within ``s.pooling``; 0: direct)."""
    started = time.monotonic()
    fleet.wait_leaders()
    pooled: float | None = 0.0
    if fleet.mode is not fleets.Mode.DIRECT:
        pooled = None
        while time.monotonic() - started < s.pooling:
            if fleetmeasures.followers_on_cloud(fleet)[0] == 0:
                pooled = time.monotonic() - started
                break
            fleet.check_alive()
            time.sleep(5)
    time.sleep(s.settle)
    return pooled


def run(args: argparse.Namespace, s: Settings, workdir: pathlib.Path) -> dict[str, Any]:
    audit = workdir / "audit"
    # Every process dies with this one (started from this thread only), even on a SIGKILL.
    cluster = realcluster.RealCluster(
        workdir / "cluster",
        k8sbinaries.locate(),
        die_with_parent=True,
        extra_args={"kube-apiserver": fleetaudit.audit_args(audit)},
    )
    spec = fleets.FleetSpec(
        nodes=s.nodes,
        pools=s.pools,
        pods_per_node=s.pods_per_node,
        services=s.services,
        yurthub_binary=args.yurthub,
        subnet=args.subnet,
        hub_args=tuple(args.hub_arg),
    )
    out: dict[str, Any] = {
        "settings": dataclasses.asdict(s),
        "modes": {},
        "storms": {},
        "pooled_at_start": {},
        "crashes": {},
    }
    with cluster:
        fleet = fleets.Fleet(
            cluster, spec, workdir / "fleet", die_with_parent=True, restart_hubs=True, log=say
        )
        try:
            fleet.prepare()
            say("control plane alone")
            out["baseline"] = fleetmeasures.steady(
                None,
                fleet.admin,
                min(30.0, s.steady),
                mode="control plane",
                procs=fleetmeasures.Processes(fleet),
            )
            loaded = False
            for mode in args.modes:
                try:
                    say(f"{mode}: starting {s.nodes} nodes")
                    fleet.start(mode)
                    if not loaded:
                        say("applying the load")
                        fleet.apply_load()
                        loaded = True
                    pooled = settle(fleet, s)
                    out["pooled_at_start"][str(mode)] = pooled
                    say(
                        f"{mode}: followers on their leaders after {pooled} s; steady state, "
                        f"{s.steady:.0f} s"
                    )
                    steady = fleetmeasures.steady(fleet, fleet.admin, s.steady)
                    out["modes"][str(mode)] = steady
                    for kind in args.storms:
                        if kind is Storm.LEADERS_KILLED and mode is fleets.Mode.DIRECT:
                            continue
                        outage = {
                            Storm.CUT: s.cut,
                            Storm.COMPACTED: s.outage,
                            Storm.LEADERS_KILLED: s.leaders_down,
                        }.get(kind, 0.0)
                        say(f"{mode}: storm {kind} ({outage:.0f} s)")
                        result = fleetstorms.storm(
                            fleet,
                            kind,
                            outage=outage,
                            deadline=s.deadline,
                            audit_log=audit / "audit.log",
                            pool_target=steady.pool_watches,
                            log=say,
                        )
                        out["storms"].setdefault(str(kind), {})[str(mode)] = result
                        say(
                            f"{mode}: {kind}: ready {result.ready_after}, caches "
                            f"{result.caches_equal_after}, pooled {result.pooled_after}"
                        )
                        # Back to steady state before the next storm.
                        fleet.wait_ready(s.deadline)
                        time.sleep(min(30.0, s.settle))
                    out["crashes"][str(mode)] = fleet.crashes()
                    fleet.stop()
                except Exception as e:  # one mode failing must not lose the others
                    say(f"{mode}: failed, going on with the next mode: {e!r}")
                    out.setdefault("failed", {})[str(mode)] = repr(e)
                    with contextlib.suppress(Exception):
                        fleet.stop()
        finally:
            fleet.close()
    return out


# --- printing -----------------------------------------------------------------------------------


def num(value: float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    if abs(value) >= 10_000:
        return f"{value:,.0f}{unit}"
    return f"{value:.{digits}f}{unit}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0 or a < 0:
        return "-"
    return f"{a / b:.2f}x"


def table(
    title: str, modes: Sequence[str], rows: list[tuple[str, dict[str, float | None], str]]
) -> None:
    print(f"\n{title}")
    ratios = [("edgehub", "direct"), ("edgehub", "yurthub")]
    ratios = [(a, b) for a, b in ratios if a in modes and b in modes]
    head = f"  {'':44}" + "".join(f"{m:>12}" for m in modes)
    head += "".join(f"{a[:4] + '/' + b[:6]:>14}" for a, b in ratios)
    print(head)
    for label, values, unit in rows:
        line = f"  {label:44}" + "".join(f"{num(values.get(m), unit):>12}" for m in modes)
        line += "".join(f"{ratio(values.get(a), values.get(b)):>14}" for a, b in ratios)
        print(line)


def watch_delta(resource: str, base: fleetmeasures.Steady, st: fleetmeasures.Steady) -> float:
    return st.watches.get(resource, 0.0) - base.watches.get(resource, 0.0)


def connections_delta(base: fleetmeasures.Steady, st: fleetmeasures.Steady) -> float | None:
    """The fleet's established connections into kube-apiserver (the control plane's taken off)."""
    if st.connections is None or base.connections is None:
        return None
    return float(st.connections - base.connections)


def rate_delta(key: str, base: fleetmeasures.Steady, st: fleetmeasures.Steady) -> float:
    return st.requests.get(key, 0.0) / st.seconds - base.requests.get(key, 0.0) / base.seconds


def report(out: Mapping[str, Any], s: Settings, args: argparse.Namespace) -> None:
    base: fleetmeasures.Steady = out["baseline"]
    modes_run: dict[str, fleetmeasures.Steady] = out["modes"]
    modes = list(modes_run)
    n = s.nodes
    print(
        f"\nfleet: {n} nodes in {s.pools} pools, {s.pods_per_node} pods per node, "
        f"{s.services} Services; {os.cpu_count()} cores; load average at the end "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    for failed, why in out.get("failed", {}).items():
        print(f"mode {failed} FAILED (its figures are missing or partial): {why}")
    apiserver = base.control.get("kube-apiserver", fleetmeasures.Cost(0, 0))
    print(
        f"control plane alone: {num(base.request_rate)} req/s, "
        f"watches {num(sum(base.watches.values()), digits=0)} "
        f"(services+endpointslices {num(base.pool_watches, digits=0)}), "
        f"apiserver {num(apiserver.millicores)} mc {num(apiserver.rss_mib)} MiB, "
        f"{num(base.connections, digits=0)} TCP connections into it"
    )

    def per_mode(fn: Callable[[fleetmeasures.Steady], float | None]) -> dict[str, float | None]:
        return {m: fn(st) for m, st in modes_run.items()}

    def role(st: fleetmeasures.Steady, name: str, attr: str) -> float | None:
        r = st.roles.get(name)
        return None if r is None else float(getattr(r, attr))

    def control(st: fleetmeasures.Steady, name: str, attr: str) -> float | None:
        c = st.control.get(name)
        return None if c is None else float(getattr(c, attr))

    rows: list[tuple[str, dict[str, float | None], str]] = [
        (
            "watches, fleet's (all minus control plane's)",
            per_mode(lambda st: sum(st.watches.values()) - sum(base.watches.values())),
            "",
        ),
        (
            "  services + endpointslices (target 2·P hubs)",
            per_mode(lambda st: st.pool_watches - base.pool_watches),
            "",
        ),
    ]
    resources = sorted({r for st in modes_run.values() for r in st.watches})
    for r in resources:
        if r in ("services", "endpointslices"):
            continue
        values = per_mode(functools.partial(watch_delta, r, base))
        if any(v for v in values.values()):
            rows.append((f"  {r}", values, ""))
    rows += [
        ("requests/s, fleet's", per_mode(lambda st: st.request_rate - base.request_rate), ""),
    ]
    keys = sorted(
        {k for st in modes_run.values() for k in st.requests},
        key=lambda k: -max(st.requests.get(k, 0) for st in modes_run.values()),
    )
    for k in keys[:12]:
        rows.append((f"  {k}", per_mode(functools.partial(rate_delta, k, base)), ""))
    rows += [
        ("edge links, KiB/s (all nodes)", per_mode(lambda st: st.link_bytes_per_second / 1024), ""),
        (
            "edge link, MiB per node per hour",
            per_mode(lambda st: st.link_bytes_per_second * 3600 / n / (1 << 20)),
            "",
        ),
        (
            "TCP connections into kube-apiserver, fleet's",
            per_mode(functools.partial(connections_delta, base)),
            "",
        ),
        (
            "kube-apiserver CPU, millicores",
            per_mode(lambda st: control(st, "kube-apiserver", "millicores")),
            "",
        ),
        (
            "kube-apiserver RSS, MiB",
            per_mode(lambda st: control(st, "kube-apiserver", "rss_mib")),
            "",
        ),
        ("etcd CPU, millicores", per_mode(lambda st: control(st, "etcd", "millicores")), ""),
        (
            "hub CPU per node, millicores (mean)",
            per_mode(lambda st: role(st, "hub", "mean_millicores")),
            "",
        ),
        (
            "hub CPU per node, millicores (max)",
            per_mode(lambda st: role(st, "hub", "max_millicores")),
            "",
        ),
        ("hub RSS per node, MiB (mean)", per_mode(lambda st: role(st, "hub", "mean_rss_mib")), ""),
        ("hub RSS per node, MiB (max)", per_mode(lambda st: role(st, "hub", "max_rss_mib")), ""),
        (
            "hollow kubelet CPU mc / RSS MiB (mean)",
            per_mode(lambda st: role(st, "kubelet", "mean_millicores")),
            "",
        ),
        ("  RSS", per_mode(lambda st: role(st, "kubelet", "mean_rss_mib")), ""),
        (
            "hollow kube-proxy CPU mc (mean)",
            per_mode(lambda st: role(st, "kube-proxy", "mean_millicores")),
            "",
        ),
        ("  RSS", per_mode(lambda st: role(st, "kube-proxy", "mean_rss_mib")), ""),
        (
            "link (harness) CPU mc (mean)",
            per_mode(lambda st: role(st, "link", "mean_millicores")),
            "",
        ),
        ("  RSS", per_mode(lambda st: role(st, "link", "mean_rss_mib")), ""),
        (
            "followers reading the cloud",
            per_mode(
                lambda st: None if st.followers_on_cloud is None else st.followers_on_cloud[0]
            ),
            "",
        ),
        ("429s to kubelets", per_mode(lambda st: st.kubelet_429), ""),
        (
            "hubs whose cache differs from the apiserver for 5 s",
            per_mode(lambda st: st.cache_problems),
            "",
        ),
        (
            "after start: every follower on its leader, s",
            {m: out["pooled_at_start"].get(m) for m in modes},
            "",
        ),
        (
            "hub crashes in the whole mode (restarted)",
            {m: float(len(out["crashes"].get(m, []))) for m in modes},
            "",
        ),
    ]
    table(f"steady state ({s.steady:.0f} s window, measured at N={n})", modes, rows)

    storms: dict[str, dict[str, fleetstorms.StormResult]] = out["storms"]
    for kind, by_mode in storms.items():
        storm_table(kind, by_mode, s)

    for mode, crashes in out["crashes"].items():
        for crash in crashes[:3]:
            print(f"\n{mode}: hub crash: {crash}")

    costs(modes_run, n)
    print_model(out, s)


def storm_table(kind: str, by_mode: Mapping[str, fleetstorms.StormResult], s: Settings) -> None:
    def f(fn: Callable[[fleetstorms.StormResult], float | None]) -> dict[str, float | None]:
        return {m: fn(r) for m, r in by_mode.items()}

    def lists(r: fleetstorms.StormResult, kind: str) -> float | None:
        if r.lists is None:
            return None
        return float(getattr(r.lists, kind))

    rows: list[tuple[str, dict[str, float | None], str]] = [
        ("outage, s", f(lambda r: r.outage_seconds), ""),
        ("peak requests/s (1 s samples)", f(lambda r: r.peak_request_rate), ""),
        ("  arriving (watches at their start)", f(lambda r: r.arrival_peak_rate), ""),
        ("requests/s before the storm", f(lambda r: r.baseline_request_rate), ""),
        ("requests until recovered", f(lambda r: r.requests), ""),
        ("429s from the apiserver", f(lambda r: r.code_429), ""),
        ("  APF rejections", f(lambda r: r.apf_rejected), ""),
        ("429s to kubelets", f(lambda r: r.kubelet_429), ""),
        ("every node Ready after, s", f(lambda r: r.ready_after), ""),
        ("every cache equal after, s", f(lambda r: r.caches_equal_after), ""),
        ("services+endpointslices watches back after, s", f(lambda r: r.pooled_after), ""),
        ("pods evicted", f(lambda r: r.evicted), ""),
        ("leader changes", f(lambda r: r.leader_changes), ""),
        ("followers on the cloud (peak, 5 s samples)", f(lambda r: r.followers_on_cloud_peak), ""),
        ("fleet relists (LIST rv unset/0, streaming)", f(lambda r: lists(r, "relists")), ""),
        ("  fleet LISTs (any resourceVersion)", f(lambda r: lists(r, "lists")), ""),
        ("  fleet watches resumed from a version", f(lambda r: lists(r, "resumed")), ""),
        ("all LISTs (apiserver metrics)", f(lambda r: r.all_lists), ""),
        ("edge link MiB until recovered", f(lambda r: r.link_bytes / (1 << 20)), ""),
    ]
    table(f"storm {kind} (N={s.nodes}, deadline {s.deadline:.0f} s)", list(by_mode), rows)
    for m, r in by_mode.items():
        for what, found in (("peak", r.peak_mix), ("arriving peak", r.arrival_mix)):
            if found:
                mix = ", ".join(f"{k} {v:g}" for k, v in found.items())
                print(f"  {m}: the {what} second, requests/s: {mix}")
        if r.lists is not None and r.lists.relists:
            print(
                f"  {m}: relists by component {r.lists.by_component}, by resource "
                f"{r.lists.by_resource}"
            )
        for node, problems in list(r.cache_problems.items())[:3]:
            print(f"  {m}: {node} cache still differs: {problems[:3]}")


def storm_peak(storm: fleetstorms.StormResult) -> float:
    """The storm's peak for the model: requests arriving (watches at their start) when the
    audit log gave it, else the metrics' (which count a watch when it ends)."""
    if storm.arrival_peak_rate is not None:
        return storm.arrival_peak_rate
    return storm.peak_request_rate


def costs(modes_run: Mapping[str, fleetmeasures.Steady], n: int) -> None:
    print("\ncost per node on this machine (steady state, measured):")
    with open("/proc/meminfo") as f:
        mem = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    for mode, st in modes_run.items():
        roles = ["hub", "kubelet", "kube-proxy"]
        mc = sum(st.roles[r].mean_millicores for r in roles if r in st.roles)
        rss = sum(st.roles[r].mean_rss_mib for r in roles if r in st.roles)
        link = st.roles.get("link")
        harness_mc = mc + (link.mean_millicores if link else 0)
        harness_rss = rss + (link.mean_rss_mib if link else 0)
        by_cpu = (os.cpu_count() or 1) * 1000 * 0.5 / max(harness_mc, 0.1)
        by_mem = mem["MemTotal"] / (1 << 20) * 0.5 / max(harness_rss, 1)
        bound = "CPU" if by_cpu < by_mem else "memory"
        print(
            f"  {mode:8} node {mc:6.1f} mc {rss:6.0f} MiB; with its link {harness_mc:6.1f} mc "
            f"{harness_rss:6.0f} MiB -> half this machine fits ~{by_cpu:,.0f} nodes by CPU, "
            f"~{by_mem:,.0f} by memory: {bound} bounds N"
        )


def measured_for_model(
    out: Mapping[str, Any],
) -> tuple[dict[str, fleetmodel.Measured], fleetmodel.Baseline]:
    base: fleetmeasures.Steady = out["baseline"]
    cut: dict[str, fleetstorms.StormResult] = out["storms"].get(str(Storm.CUT), {})
    measured = {}
    for mode, st in out["modes"].items():
        storm = cut.get(mode)
        measured[mode] = fleetmodel.Measured(
            mode=mode,
            nodes=st.nodes,
            pools=st.pools,
            watches=sum(st.watches.values()),
            pool_watches=st.pool_watches,
            request_rate=st.request_rate,
            link_bytes_per_second=st.link_bytes_per_second,
            storm_peak_rate=None if storm is None else storm_peak(storm),
            storm_requests=None if storm is None else storm.requests,
            storm_link_bytes=None if storm is None else float(storm.link_bytes),
            connections=None if st.connections is None else float(st.connections),
        )
    baseline = fleetmodel.Baseline(
        watches=sum(base.watches.values()),
        pool_watches=base.pool_watches,
        request_rate=base.request_rate,
        connections=None if base.connections is None else float(base.connections),
    )
    return measured, baseline


def print_model(out: Mapping[str, Any], s: Settings) -> None:
    measured, baseline = measured_for_model(out)
    if not measured:
        return
    target = fleetmodel.Target()
    extrapolated = fleetmodel.model(measured, baseline, target)
    modes = list(extrapolated)
    print(
        f"\nmodel: {target.nodes:,} nodes in {target.pools} pools, {target.pods:,} pods "
        f"(extrapolated from N={s.nodes}, P={s.pools}; {s.services} Services)"
    )
    rows: list[tuple[str, dict[str, float | None], str]] = [
        ("watches", {m: e.watches for m, e in extrapolated.items()}, ""),
        ("  services + endpointslices", {m: e.pool_watches for m, e in extrapolated.items()}, ""),
        ("steady requests/s", {m: e.request_rate for m, e in extrapolated.items()}, ""),
        ("edge links GiB per hour", {m: e.link_gib_per_hour for m, e in extrapolated.items()}, ""),
        (
            "TCP connections into kube-apiserver",
            {m: e.connections for m, e in extrapolated.items()},
            "",
        ),
        (
            "reconnect storm peak requests/s (upper bound)",
            {m: e.storm_peak_rate for m, e in extrapolated.items()},
            "",
        ),
        ("reconnect storm requests", {m: e.storm_requests for m, e in extrapolated.items()}, ""),
        (
            "reconnect storm GiB over the links",
            {m: e.storm_link_gib for m, e in extrapolated.items()},
            "",
        ),
    ]
    table("model to 10,000 nodes (extrapolated; per-node figures measured)", modes, rows)
    print(
        "  the cloud-side manager (not run by this bench: measured by bench/manager_scale.py at "
        "5,000 nodes / 50,000 pods, docs/performance.md), RSS extrapolated to this size:"
    )
    for m in fleetmodel.MANAGERS_MEASURED:
        size = fleetmodel.manager_rss_mb(m, target)
        print(
            f"    {m.name:<16} {m.rss_empty_mb:,.0f} MB empty, {m.rss_at_size_mb:,.0f} MB measured "
            f"at {m.nodes:,} nodes / {m.pods:,} pods -> ~{size:,.0f} MB at {target.nodes:,} / "
            f"{target.pods:,} (extrapolated)"
        )


# --- output -------------------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="6 nodes, 2 pools, short storms")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--pools", type=int)
    parser.add_argument("--pods-per-node", type=int)
    parser.add_argument("--services", type=int)
    parser.add_argument("--steady-seconds", type=float)
    parser.add_argument("--cut-seconds", type=float, help="storm cut: how long links stay cut")
    parser.add_argument("--outage-seconds", type=float, help="storm compacted: the outage")
    parser.add_argument("--modes", default="direct,edgehub,yurthub")
    parser.add_argument("--storms", default=",".join(s.value for s in Storm))
    parser.add_argument("--subnet", type=int, default=10, help="nodes are 127.<subnet>.x.y")
    parser.add_argument(
        "--hub-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="one more flag for every edgehub hub (repeatable: "
        "--hub-arg=--no-upstream-http2-watches)",
    )
    parser.add_argument("--json", type=pathlib.Path, help="write every figure here")
    parser.add_argument("--workdir", type=pathlib.Path, help="keep logs here (default: a temp dir)")
    args = parser.parse_args(argv)
    s = QUICK if args.quick else FULL
    s = dataclasses.replace(
        s,
        nodes=args.nodes or s.nodes,
        pools=args.pools or s.pools,
        pods_per_node=args.pods_per_node if args.pods_per_node is not None else s.pods_per_node,
        services=args.services or s.services,
        steady=args.steady_seconds or s.steady,
        cut=args.cut_seconds or s.cut,
        outage=args.outage_seconds or s.outage,
    )
    args.modes = [fleets.Mode(m) for m in args.modes.split(",") if m]
    args.storms = [Storm(k) for k in args.storms.split(",") if k]
    args.yurthub = yurthub_binary()
    if fleets.Mode.YURTHUB in args.modes and args.yurthub is None:
        say("YurtHub v1.7.0 is not built (make yurthub-bin): mode yurthub left out")
        args.modes.remove(fleets.Mode.YURTHUB)
    # SIGTERM ends the run like Ctrl-C: every process stopped, the cluster down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = args.workdir or pathlib.Path(tempfile.mkdtemp(prefix="edgehub-fleet-"))
    started = time.monotonic()
    try:
        out = run(args, s, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report(out, s, args)
    print(f"\n(ran {time.monotonic() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(jsonable(out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
