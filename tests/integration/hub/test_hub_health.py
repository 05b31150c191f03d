"""Heartbeat prober against a loopback apiserver: lease create/renew, callback, kubelet gate."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import pytest
from hubfakes import FakeApiserver

MakeHub = Callable[..., Any]


async def test_lease_is_created_then_renewed_and_handed_over(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    got: list[tuple[str, Mapping[str, object]]] = []

    async def on_lease(server: str, lease: Mapping[str, object], raw: bytes) -> None:
        got.append((server, lease))

    async with make_hub([apiserver.url], wait_ready=False, interval=0.1) as hub:
        hub.on_lease = on_lease
        async with asyncio.timeout(3):
            while apiserver.lease_puts < 2:
                await asyncio.sleep(0.05)
    assert apiserver.lease is not None
    assert apiserver.lease["spec"]["holderIdentity"] == "n1"
    assert apiserver.lease["spec"]["leaseDurationSeconds"] == 40
    owner = apiserver.lease["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Node", "u1")
    assert got and got[-1][0] == apiserver.url
    assert got[-1][1]["kind"] == "Lease"


async def test_a_lease_answer_in_pieces_is_read_whole(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    apiserver.lease_in_pieces = True
    got: list[Mapping[str, Any]] = []

    async def on_lease(server: str, lease: Mapping[str, Any], raw: bytes) -> None:
        got.append(lease)

    async with make_hub([apiserver.url], wait_ready=False, interval=0.1) as hub:
        hub.on_lease = on_lease
        async with asyncio.timeout(5):
            while len(got) < 3:
                await asyncio.sleep(0.05)
        assert hub.health.is_healthy(apiserver.url)
    # Each lease handed to the cache is the whole answer, not its first piece.
    assert [lease["metadata"]["name"] for lease in got] == ["n1"] * len(got)


async def test_kubelet_silence_fails_the_heartbeat(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url], interval=0.1, kubelet_health_grace_period=0.3) as hub:
        assert hub.health.is_healthy(apiserver.url)
        lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
        async with (
            aiohttp.ClientSession() as s,
            s.get(hub.proxy_url + lease, headers={"User-Agent": "kubelet/v1"}) as r,
        ):
            assert r.status == 200  # no cache: proxied
        puts = apiserver.lease_puts
        async with asyncio.timeout(3):
            while hub.health.is_healthy(apiserver.url):
                await asyncio.sleep(0.05)
        # the server was never asked: the gate failed the probe locally
        assert apiserver.lease_puts <= puts + 3


async def test_transport_error_probes_at_once(make_hub: MakeHub) -> None:
    api = FakeApiserver()
    await api.start()
    try:
        # a long heartbeat interval: only the suspect probe can notice the dead server
        async with make_hub([api.url], interval=60) as hub:
            assert hub.health.is_healthy(api.url)
            await api.stop(keep_port=True)
            async with aiohttp.ClientSession() as s, s.get(hub.proxy_url + "/api/v1/pods") as r:
                assert r.status == 502
            async with asyncio.timeout(2):
                while hub.health._states[api.url].healthy:
                    await asyncio.sleep(0.02)
            # back up: the next tick would find it; the state machine needs the threshold
            await api.start()
    finally:
        await api.stop()


async def cut_until_gone(
    apiserver: FakeApiserver, make_hub: MakeHub, caplog: pytest.LogCaptureFixture, mode: Any
) -> tuple[str, list[str], str]:
    """A hub in front of ``apiserver`` through a partition (3 attempts of 0.5 s) that is put
    in ``mode`` until the hub declares the server unhealthy: its URL, the hub's log lines from
    the cut on, and the server's last error."""
    from yurthub.testing import partition

    caplog.set_level(logging.INFO, logger="yurthub")
    host, port = apiserver.url.removeprefix("http://").split(":")
    async with partition.Partition(host, int(port)) as link:
        url = f"http://{link.address}"
        async with make_hub([url], interval=0.2, timeout=0.5, failed_retry=3) as hub:
            assert hub.health.is_healthy(url)
            caplog.clear()
            await link.set_mode(mode)
            async with asyncio.timeout(30):
                while hub.health._states[url].healthy:
                    await asyncio.sleep(0.02)
            last_error = hub.health.reports[url].last_error
    return url, [r.getMessage() for r in caplog.records], last_error


async def test_a_blackholed_server_in_use_is_gone_after_failed_retry_timeouts(
    apiserver: FakeApiserver, make_hub: MakeHub, caplog: pytest.LogCaptureFixture
) -> None:
    """A server in use is declared gone only after ``failed_retry`` renewals in a row got no
    answer (YurtHub's three heartbeat attempts): one late answer from a busy apiserver is not a
    cut. The order of the hub's own log lines is asserted, not how long it took."""
    from yurthub.testing import partition

    url, lines, _ = await cut_until_gone(apiserver, make_hub, caplog, partition.Mode.BLACKHOLE)
    retries = [n for n, m in enumerate(lines) if "trying again before declaring it gone" in m]
    gone = lines.index(f"server {url} is now unhealthy")
    assert [lines[n].split("(attempt ")[1][:6] for n in retries] == ["1 of 3", "2 of 3"], lines
    assert retries[-1] < gone, lines


async def test_a_refused_connection_is_gone_at_the_first_attempt(
    apiserver: FakeApiserver, make_hub: MakeHub, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listens: the next attempt would say the same at once, so none is made."""
    from yurthub.testing import partition

    url, lines, last_error = await cut_until_gone(
        apiserver, make_hub, caplog, partition.Mode.REFUSE
    )
    gone = lines.index(f"server {url} is now unhealthy")
    # The pooled connection's reset may be tried again; the refusal never is.
    retried = [m for m in lines[:gone] if "trying again before declaring it gone" in m]
    assert not [m for m in retried if "refused" in m], lines
    assert "refused" in last_error


async def test_a_slow_heartbeat_of_a_server_still_answering_keeps_it_in_use(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    """An apiserver busy with a fleet coming back at once answers the lease later than the
    probe's timeout while its other answers keep arriving: slow, not gone. The hub keeps it
    (no outage, its watches go on) and counts it."""
    async with make_hub([apiserver.url], interval=0.2, timeout=0.3, failed_retry=3) as hub:
        health = hub.health
        assert health.is_healthy(apiserver.url)
        apiserver.lease_delay = 1.0
        async with aiohttp.ClientSession() as s:
            # A stream of answers from the same server (each 0.1 s) while the renewals time out.
            slow = hub.proxy_url + "/api/v1/namespaces/d/configmaps/slow?sleep=0.1"
            async with asyncio.timeout(30):
                while health.slow_alive < 2:
                    async with s.get(slow) as r:
                        assert r.status == 200
                        await r.read()
        assert health.is_healthy(apiserver.url)
        assert health.reports[apiserver.url].healthy
        value = hub.metrics.registry.get_sample_value(
            "node_yurthub_heartbeat_slow_alive_total", {"server": apiserver.url}
        )
        assert value is not None and value >= 2


async def test_a_slow_heartbeat_of_a_silent_server_makes_it_gone(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    """The same late lease answers with no other traffic: nothing shows the server alive, and
    after ``failed_retry`` late answers it is declared gone."""
    async with make_hub([apiserver.url], interval=0.2, timeout=0.3, failed_retry=2) as hub:
        health = hub.health
        assert health.is_healthy(apiserver.url)
        apiserver.lease_delay = 1.0
        async with asyncio.timeout(30):
            while health.is_healthy(apiserver.url):
                await asyncio.sleep(0.02)
        assert health.slow_alive == 0


async def test_a_full_proxy_leaves_the_heartbeat_a_connection(apiserver: FakeApiserver) -> None:
    import dataclasses

    from hubfakes import hub_settings

    from yurthub import server, settings

    base = hub_settings([apiserver.url], interval=0.1, timeout=0.5)
    least = 1 + 2 + 1 + settings.EXEMPT_MARGIN  # the least pool the settings allow
    limited = dataclasses.replace(
        base,
        upstream=dataclasses.replace(base.upstream, pool_limit=least),
        proxy=dataclasses.replace(base.proxy, max_in_flight=1, max_long_running=2),
    )
    hub = server.Hub(limited)
    await hub.start()
    try:
        assert hub.health is not None
        await hub.health.initial_probe_done.wait()
        async with aiohttp.ClientSession() as s:
            watches = [await s.get(hub.proxy_url + "/api/v1/pods?watch=1") for _ in range(2)]
            watches.append(await s.get(hub.proxy_url + "/api/v1/namespaces/d/configmaps/stall"))
            try:
                async with s.get(hub.proxy_url + "/api/v1/pods") as r:
                    assert r.status == 429  # the proxy is full
                before = apiserver.lease_puts
                async with asyncio.timeout(5):  # and the heartbeat still gets through
                    while apiserver.lease_puts < before + 3:
                        await asyncio.sleep(0.05)
                assert hub.health.is_healthy(apiserver.url)
            finally:
                for watch in watches:
                    watch.close()
    finally:
        await hub.stop()


async def test_a_slow_apiserver_costs_a_probe_per_gap_not_per_request(
    apiserver: FakeApiserver,
) -> None:
    from hubfakes import running_hub

    from yurthub import health

    async with (
        running_hub([apiserver.url], interval=60.0, upstream={"header_deadline": 0.1}) as hub,
        aiohttp.ClientSession() as s,
    ):
        before = apiserver.lease_puts
        slow = hub.proxy_url + "/api/v1/namespaces/d/configmaps/slow?sleep=1.5"

        async def get() -> int:
            async with s.get(slow) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(get() for _ in range(20)))
        assert statuses == [200] * 20  # slow, alive: answered by the apiserver, not the cache
        probes = apiserver.lease_puts - before
        # Each request reported the server slow ~15 times; at most one probe per gap went out.
        assert 1 <= probes <= 1.5 / health.SLOW_PROBE_GAP + 2, probes
        assert hub.health is not None and hub.health.is_healthy(apiserver.url)


async def test_a_healed_link_is_trusted_again_within_seconds_not_heartbeats(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    from yurthub.testing import partition

    host, port = apiserver.url.removeprefix("http://").split(":")
    async with partition.Partition(host, int(port)) as link:
        url = f"http://{link.address}"
        # A heartbeat far longer than the test: only probes of the unhealthy server can see
        # it come back, and the threshold's probes must not wait an interval each.
        async with make_hub([url], interval=60, timeout=0.5, healthy_threshold=2) as hub:
            assert hub.health.is_healthy(url)
            await link.set_mode(partition.Mode.REFUSE)
            async with aiohttp.ClientSession() as s, s.get(hub.proxy_url + "/api/v1/pods") as r:
                assert r.status in (502, 503)
            async with asyncio.timeout(5):
                while hub.health.is_healthy(url):
                    await asyncio.sleep(0.02)
            puts = apiserver.lease_puts
            await link.set_mode(partition.Mode.PASS)
            async with asyncio.timeout(15):
                while not hub.health.is_healthy(url):
                    await asyncio.sleep(0.05)
            # Trusted after real lease round trips: the threshold's two.
            assert apiserver.lease_puts >= puts + 2


async def test_a_link_healed_after_a_long_outage_is_seen_within_seconds(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    from yurthub.testing import partition

    host, port = apiserver.url.removeprefix("http://").split(":")
    async with partition.Partition(host, int(port)) as link:
        url = f"http://{link.address}"
        async with make_hub([url], interval=60, timeout=0.5, healthy_threshold=2) as hub:
            assert hub.health.is_healthy(url)
            await link.set_mode(partition.Mode.RESET)
            async with aiohttp.ClientSession() as s, s.get(hub.proxy_url + "/api/v1/pods") as r:
                assert r.status in (502, 503)
            async with asyncio.timeout(5):
                while hub.health.is_healthy(url):
                    await asyncio.sleep(0.02)
            # Long enough for the probes' back-off to have grown: 1, 2, 4, 8 s apart before
            # (the next one 16 s later), 1, 2, 2, 2 s now.
            failures: set[float] = set()
            async with asyncio.timeout(30):
                while len(failures) < 4:
                    when = hub.health.reports[url].last_error_at
                    if when is not None:
                        failures.add(when)
                    await asyncio.sleep(0.02)
            await link.set_mode(partition.Mode.PASS)
            async with asyncio.timeout(8):
                while not hub.health.is_healthy(url):
                    await asyncio.sleep(0.05)


async def test_an_apiserver_answering_late_after_an_outage_is_trusted_again(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    # After a fleet-wide heal the apiserver answers renewals later than the heartbeat timeout.
    # While the hub is offline it waits for that answer (up to an interval) instead of failing
    # every probe at the timeout until the storm is over.
    async with make_hub([apiserver.url], interval=3.0, timeout=0.5, healthy_threshold=2) as hub:
        assert hub.health.is_healthy(apiserver.url)
        await apiserver.stop(keep_port=True)
        async with asyncio.timeout(10):
            while hub.health.is_healthy(apiserver.url):
                await asyncio.sleep(0.02)
        apiserver.lease_delay = 1.0  # twice the timeout, a third of the interval
        puts = apiserver.lease_puts
        await apiserver.start()
        async with asyncio.timeout(15):
            while not hub.health.is_healthy(apiserver.url):
                await asyncio.sleep(0.05)
        assert apiserver.lease_puts >= puts + 2
        # Online again, the timeout is the bound again once the heal and the last late answer
        # are two intervals old: a renewal this late is then a failure (no proxied answer
        # arrives meanwhile to prove it alive).
        await answered_in_time_for(apiserver, hub.health, seconds=2 * 3.0)
        apiserver.lease_delay = 1.0
        async with asyncio.timeout(15):
            while hub.health.is_healthy(apiserver.url):
                await asyncio.sleep(0.05)


async def renewed_after_a_silence(apiserver: FakeApiserver, health: Any) -> None:
    """Let ``apiserver`` answer renewals after 2 s (beyond 3 attempts of 0.5 s, within a 3 s
    interval) until one is accepted that late."""
    apiserver.lease_delay = 2.0
    silent_from = time.time()
    async with asyncio.timeout(20):
        while (health.reports[apiserver.url].last_success_at or 0.0) < silent_from + 1.9:
            await asyncio.sleep(0.05)


async def answered_in_time_for(apiserver: FakeApiserver, health: Any, *, seconds: float) -> None:
    """Let ``apiserver`` answer renewals at once until one is accepted ``seconds`` after now:
    the storm is over as far as the prober can tell."""
    apiserver.lease_delay = 0.0
    calm_from = time.time()
    async with asyncio.timeout(seconds + 15):
        while (health.reports[apiserver.url].last_success_at or 0.0) < calm_from + seconds:
            await asyncio.sleep(0.05)


async def test_an_apiserver_silent_for_seconds_right_after_the_heal_is_not_gone_again(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    """Right after a fleet-wide heal the apiserver can answer nothing for seconds (9.5 s in a
    fleet run of 30 nodes, 0.4 s after the heal). For two intervals after the heal a probe's
    first attempt waits up to an interval for its answer: a renewal answered later than
    ``failed_retry`` timeouts (but within the interval) keeps the hub online. The same silence
    once the storm is over (two intervals of timely answers) is an outage again, noticed at the
    timeouts."""
    async with make_hub(
        [apiserver.url], interval=3.0, timeout=0.5, healthy_threshold=1, failed_retry=3
    ) as hub:
        health = hub.health
        url = apiserver.url
        await apiserver.stop(keep_port=True)
        async with asyncio.timeout(10):
            while health.is_healthy(url):
                await asyncio.sleep(0.02)
        await apiserver.start()
        async with asyncio.timeout(15):
            while not health.is_healthy(url):
                await asyncio.sleep(0.02)
        changes: list[bool] = []
        health.on_cloud.append(changes.append)
        await renewed_after_a_silence(apiserver, health)
        assert changes == [], "declared gone during the heal's storm"
        assert health.is_healthy(url)
        await answered_in_time_for(apiserver, health, seconds=2 * 3.0)
        apiserver.lease_delay = 2.0
        async with asyncio.timeout(30):
            while health.is_healthy(url):
                await asyncio.sleep(0.05)
        assert changes == [False]


async def test_an_apiserver_answering_late_stays_in_use_through_seconds_of_silence(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    """The storm after a heal can outlast any fixed window (in a fleet run of 30 nodes the
    apiserver went silent for about 10 s, 31 s after the heal, while the fleet was still
    re-listing). An apiserver that answered the proxy late shows the storm: for two intervals
    after that a probe's first attempt waits up to an interval, so a renewal answered beyond
    ``failed_retry`` timeouts keeps the hub online, heal or not."""
    async with make_hub(
        [apiserver.url], interval=3.0, timeout=0.5, healthy_threshold=1, failed_retry=3
    ) as hub:
        health = hub.health
        url = apiserver.url
        changes: list[bool] = []
        health.on_cloud.append(changes.append)
        # Past the proxy's header deadline (1 s): a late answer.
        slow = "/api/v1/namespaces/default/configmaps/slow?sleep=1.3"
        async with aiohttp.ClientSession() as s, s.get(hub.proxy_url + slow) as r:
            assert r.status == 200
        await renewed_after_a_silence(apiserver, health)
        assert changes == [], "declared gone while it answered late"
        assert health.is_healthy(url)


async def test_requests_a_cut_leaves_unanswered_do_not_make_the_prober_patient(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    """Only answers show strain: a request that got none (a cut link holds it) must not slow
    the detection of that cut. Every attempt waits the timeout, not the interval."""
    from yurthub.testing import partition

    host, port = apiserver.url.removeprefix("http://").split(":")
    async with partition.Partition(host, int(port)) as link:
        url = f"http://{link.address}"
        async with make_hub([url], interval=3.0, timeout=0.5, failed_retry=3) as hub:
            reasons: list[str] = []
            hub.health.on_failure.append(lambda _server, _cause, words: reasons.append(words))
            await link.set_mode(partition.Mode.BLACKHOLE)

            async def held(s: aiohttp.ClientSession) -> None:
                with contextlib.suppress(aiohttp.ClientError):
                    async with s.get(hub.proxy_url + "/api/v1/pods") as r:
                        await r.read()

            async with aiohttp.ClientSession() as s, asyncio.TaskGroup() as tg:
                request = tg.create_task(held(s), name="held-request")
                async with asyncio.timeout(30):
                    while hub.health.is_healthy(url):
                        await asyncio.sleep(0.02)
                request.cancel()
            assert reasons, "declared gone without a failed attempt"
            assert all(words.endswith("no answer within 0.5 s") for words in reasons), reasons
