"""``edgehub status``'s screen from the hub's and the agent's JSON (pure)."""

from __future__ import annotations

from typing import Any

from edgehub import statustext

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _iso(seconds_ago: float) -> str:
    import datetime

    when = datetime.datetime.fromtimestamp(NOW - seconds_ago, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


HUB: dict[str, Any] = {
    "node": "edge-1",
    "ready": False,
    "notReady": ["cloud-or-cache (no apiserver reached yet ...)"],
    "warnings": ["disk-cache: started anew"],
    "servers": [
        {
            "url": "https://a:6443",
            "healthy": True,
            "lastError": "",
            "lastSuccessTime": _iso(3),
            "lastErrorTime": None,
        },
        {
            "url": "https://b:6443",
            "healthy": False,
            "lastError": "connection refused",
            "lastErrorTime": _iso(90),
            "lastSuccessTime": None,
        },
    ],
    "cache": {
        "path": "/etc/kubernetes/cache",
        "sizeBytes": 3 * 1024 * 1024,
        "objects": 12,
        "lists": 3,
        "documents": 5,
        "writeFailures": 0,
        "reset": None,
        "components": [
            {
                "component": "kubelet",
                "objects": 10,
                "lists": 3,
                "newestList": {"ageSeconds": 7200 * 3},
            },
            {"component": "yurthub", "objects": 2, "lists": 0, "newestList": None},
        ],
    },
    "certificates": [
        {
            "name": "client",
            "subject": "CN=system:node:edge-1",
            "notAfter": "2027-01-16T08:00:00Z",
            "expiresInSeconds": 86400,
            "file": "/var/lib/yurthub/pki/yurthub-current.pem",
            "problem": "",
            "keySealedWith": 2,
        },
        {"name": "serving", "problem": "waiting for CSR csr-x"},
    ],
    "pool": {
        "nodePool": "hangzhou",
        "role": "follower",
        "leaders": [
            {"node": "edge-2", "address": "10.0.0.2", "usable": True},
            {"node": "edge-3", "address": "10.0.0.3", "usable": False},
        ],
        "resources": [
            {
                "resource": "/v1/services",
                "synced": True,
                "objects": 40,
                "clients": 2,
                "readFrom": "edge-2",
                "lastError": "",
            },
            {
                "resource": "discovery.k8s.io/v1/endpointslices",
                "synced": False,
                "objects": 0,
                "clients": 0,
                "readFrom": None,
                "lastError": "leader edge-3 refused",
            },
        ],
    },
}
AGENT: dict[str, Any] = {
    "kubeletSocket": {"path": "/var/lib/kubelet/device-plugins/kubelet.sock", "present": False},
    "handlers": [{"name": "udev", "endpoints": 1}],
    "configurations": [
        {"namespace": "default", "name": "cams", "handler": "onvif", "handlerRegistered": False,
         "instances": []},
        {"namespace": "default", "name": "video", "handler": "udev", "handlerRegistered": True,
         "instances": [{"name": "video-1a2b3c", "slots": 2, "slotsInUse": 1},
                       {"name": "video-4d5e6f", "slots": 2, "slotsInUse": 0}]},
    ],
}  # fmt: skip


def test_the_whole_screen() -> None:
    text = statustext.render(HUB, "http://127.0.0.1:10267", NOW, agent=AGENT, agent_source="x")
    lines = text.splitlines()
    assert lines[:4] == [
        "edgehub hub on node edge-1 (http://127.0.0.1:10267)",
        "Ready: NO",
        "  - cloud-or-cache (no apiserver reached yet ...)",
        "  warning: disk-cache: started anew",
    ]
    assert "  https://a:6443  healthy    3s ago        -" in lines
    assert "  https://b:6443  UNHEALTHY  never         connection refused (90s ago)" in lines
    assert any(
        line.startswith("CACHE  /etc/kubernetes/cache  3.0 MiB, 12 objects") for line in lines
    )
    assert "  kubelet    10       3      6h ago" in lines
    assert "  yurthub    2        0      never listed" in lines
    assert any("2027-01-16T08:00:00Z (in 24h)" in line for line in lines)
    assert "  serving: waiting for CSR csr-x" in lines
    assert (
        "POOL (pool hangzhou)  this hub follows a leader (the cloud when none is usable)" in lines
    )
    assert "  leaders: edge-2/10.0.0.2 (usable), edge-3/10.0.0.3 (unusable)" in lines
    pool_rows = [line for line in lines if "/v1/" in line]
    assert pool_rows[0].split() == ["/v1/services", "yes", "40", "2", "edge-2", "-"]
    assert pool_rows[1].split()[:5] == ["discovery.k8s.io/v1/endpointslices", "no", "0", "0", "-"]
    assert pool_rows[1].endswith("leader edge-3 refused")
    assert (
        "  kubelet socket /var/lib/kubelet/device-plugins/kubelet.sock: MISSING: device "
        "plugins wait for kubelet" in lines
    )
    assert "  default/cams   onvif (NOT REGISTERED)  0        0/0" in lines
    assert "  default/video  udev                    2        1/4" in lines


def test_missing_parts_are_dashes_not_crashes() -> None:
    text = statustext.render({"ready": True}, "http://h", NOW, agent=None, agent_problem="refused")
    assert "Ready: yes" in text
    assert "CACHE  none" in text
    assert "no discovery agent answered: refused" in text
    text = statustext.render(None, "http://h", NOW, hub_problem="connection refused")
    assert text.startswith("edgehub hub: no answer from http://h: connection refused")


def test_an_expired_certificate_says_so() -> None:
    hub = {**HUB, "certificates": [{"name": "client", "subject": "CN=x", "notAfter": "t",
                                    "expiresInSeconds": -3 * 86400, "file": "f"}]}  # fmt: skip
    assert "(EXPIRED 3d ago)" in statustext.render(hub, "u", NOW)


WHY = "127.0.0.1 is a loopback address (in a pod's network namespace, the pod itself)"


def test_filters_kept_off_say_why() -> None:
    hub = {
        **HUB,
        "filters": {
            "active": ["discardcloudservice", "nodeportisolation", "servicetopology"],
            "inactive": {"masterservice": WHY, "forwardkubesvctraffic": WHY},
            "hubAddress": "127.0.0.1:10268",
        },
    }
    lines = statustext.render(hub, "u", NOW).splitlines()
    assert "FILTERS  discardcloudservice, nodeportisolation, servicetopology" in lines
    assert (
        "  OFF: masterservice, forwardkubesvctraffic "
        f"(pods cannot reach the hub at 127.0.0.1:10268: {WHY})" in lines
    )
    ok = {**HUB, "filters": {"active": ["masterservice"], "inactive": {}, "hubAddress": "h:1"}}
    lines = statustext.render(ok, "u", NOW).splitlines()
    assert "FILTERS  masterservice" in lines
    assert not any("OFF" in line for line in lines)


def test_filters_off_or_not_reported() -> None:
    off = {
        **HUB,
        "filters": {"active": [], "inactive": {}, "note": "--enable-resource-filter=false"},
    }
    assert "FILTERS  none (--enable-resource-filter=false)" in statustext.render(off, "u", NOW)
    assert "FILTERS  -" in statustext.render(HUB, "u", NOW)


def test_failing_cache_writes_are_counted_and_warned() -> None:
    warning = "disk-cache: write failures: disk full (ENOSPC) since 2027-01-15T07:00:00Z"
    error = {"reason": "disk full (ENOSPC)", "since": "2027-01-15T07:00:00Z",
             "last": "2027-01-15T07:59:00Z", "failing": True, "lostLists": 2}  # fmt: skip
    cache = {**HUB["cache"], "writeFailures": 4, "errorKeys": 44, "writeError": error}
    lines = statustext.render({**HUB, "warnings": [warning], "cache": cache}, "u", NOW).splitlines()
    assert f"  warning: {warning}" in lines
    assert any(
        line.endswith("5 documents, 4 failed writes (44 objects not stored)") for line in lines
    )
    assert (
        "  warning: writes fail: disk full (ENOSPC) since 2027-01-15T07:00:00Z (failing; 2 lists "
        "read but not stored)" in lines
    )
    # An older hub's writeFailures counted keys.
    text = statustext.render({**HUB, "cache": {**HUB["cache"], "writeFailures": 3}}, "u", NOW)
    assert "3 keys whose last write failed" in text and "writes fail" not in text


def test_offline_events_waiting_are_shown_and_none_says_nothing() -> None:
    waiting = {"pending": 12, "dropped": 3, "posted": 0, "refused": 0}
    text = statustext.render({**HUB, "cache": {**HUB["cache"], "offlineEvents": waiting}}, "u", NOW)
    assert "  offline Events: 12 waiting for the cloud, 3 dropped over the journal's bounds" in (
        text.splitlines()
    )
    done = {"pending": 0, "dropped": 0, "posted": 15, "refused": 0}
    text = statustext.render({**HUB, "cache": {**HUB["cache"], "offlineEvents": done}}, "u", NOW)
    assert "offline Events" not in text


def test_what_seals_the_cache_is_shown() -> None:
    cache = {**HUB["cache"], "sealedBy": "key file /etc/edgehub/cache.kek"}
    lines = statustext.render({**HUB, "cache": cache}, "u", NOW).splitlines()
    assert "  sealed: its data key by the key file /etc/edgehub/cache.kek" in lines
    assert not any("sealed:" in line for line in statustext.render(HUB, "u", NOW).splitlines())


def test_a_pool_resource_read_while_the_cloud_is_away_is_stale_and_from_the_cache() -> None:
    stale = {
        "resource": "/v1/services",
        "synced": False,
        "staleSince": _iso(180),
        "objects": 40,
        "clients": 2,
        "readFrom": "cache",
        "lastError": "",
    }
    pool = {"nodePool": None, "role": "cloud", "resources": [stale]}
    (row,) = [line for line in statustext.pool_lines(pool, NOW) if "/v1/services" in line]
    assert row.split() == ["/v1/services", "no", "(stale", "since", "3m", "ago)", "40", "2",
                           "cache", "-"]  # fmt: skip


def test_whether_the_private_key_is_sealed_is_shown() -> None:
    text = statustext.render(HUB, "u", NOW)
    assert "sealed (data key 2)" in text
    plain = {**HUB, "certificates": [{**HUB["certificates"][0], "keySealedWith": None}]}
    assert "plain PEM" in statustext.render(plain, "u", NOW)
