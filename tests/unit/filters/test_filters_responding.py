"""Choosing a response's filtering, compressed bodies, and the runtime's decisions."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from typing import Any

import orjson
import pytest
from filter_samples import service, world

from yurthub import requestinfo, settings
from yurthub.certs import modes
from yurthub.filters import chaining, inputs, jsonbodies, protobodies, registry, responding
from yurthub.filters import runtime as filtering

DISCARD = {"svc.openyurt.io/discard": "true"}


def info(
    path: str = "/api/v1/services", ua: str = "kube-proxy/v1.30", method: str = "GET", **query: str
) -> requestinfo.RequestInfo:
    return requestinfo.classify(method, path, query, {"User-Agent": ua})


def chain() -> chaining.Chain:
    return chaining.Chain(["discardcloudservice"], world(), errors=chaining.ErrorLog())


@pytest.mark.parametrize(
    ("req", "content_type", "shape"),
    [
        (info(watch="true"), "application/json", jsonbodies.WatchStream),
        (info(), "application/json", jsonbodies.ListBody),
        (info("/api/v1/namespaces/default/services/x"), "application/json", jsonbodies.ObjectBody),
        (info(), "application/json; charset=utf-8", jsonbodies.ListBody),
        (
            info(watch="true"),
            "application/vnd.kubernetes.protobuf;stream=watch",
            protobodies.WatchStream,
        ),
        (info(), "application/vnd.kubernetes.protobuf", protobodies.ObjectBody),
        (info(), "application/json;as=Table;v=v1;g=meta.k8s.io", None),
        (info(), "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", None),
        (info(), "application/yaml", None),
        (info(), "", None),
    ],
)
def test_body_shape(req: requestinfo.RequestInfo, content_type: str, shape: type | None) -> None:
    found = responding.open_body(chain(), req, content_type, max_event=1 << 20, max_body=1 << 20)
    assert (found[0].__class__ if found else None) is shape


@pytest.mark.parametrize(
    ("req", "status", "applies"),
    [
        (info(), 200, True),
        (info(), 404, False),
        (info(), 500, False),
        (info(method="HEAD"), 200, False),
        (info("/api/v1/namespaces/a/pods/p/status", method="PATCH"), 200, True),
        (info("/api/v1/namespaces/a/pods/p/log"), 200, False),
        (info("/version"), 200, False),
    ],
)
def test_applies(req: requestinfo.RequestInfo, status: int, applies: bool) -> None:
    assert responding.applies(req, status) is applies


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        ("", ""),
        ("identity", ""),
        ("gzip", "gzip"),
        ("GZIP", "gzip"),
        ("deflate", "deflate"),
        ("br", None),
        ("zstd", None),
    ],
)
def test_encodings(encoding: str, expected: str | None) -> None:
    assert responding.encoding_of({"Content-Encoding": encoding}) == expected


def service_list(names_discarded: list[tuple[str, bool]]) -> bytes:
    return orjson.dumps(
        {
            "kind": "ServiceList",
            "apiVersion": "v1",
            "metadata": {},
            "items": [
                service(n, type_="LoadBalancer", annotations=DISCARD if d else None)
                for n, d in names_discarded
            ],
        }
    )


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_list_is_filtered_and_sent_plain(encoding: str) -> None:
    body = service_list([("a", True), ("b", False)] * 200)
    compressed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    body_filter = jsonbodies.ListBody(chain(), "Service", max_item=1 << 20)
    t = responding.Transform(body_filter, fmt="json", encoding=encoding)
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Encoding", encoding),
        ("Content-Length", str(len(compressed))),
        ("Audit-Id", "x"),
    ]
    assert t.response_headers(headers) == [("Content-Type", "application/json"), ("Audit-Id", "x")]
    out = b"".join(
        b"".join(t.feed(compressed[i : i + 100])) for i in range(0, len(compressed), 100)
    )
    out += b"".join(t.finish())
    assert [i["metadata"]["name"] for i in orjson.loads(out)["items"]] == ["b"] * 200


def test_uncompressed_keeps_content_encoding_header_absent_and_drops_length() -> None:
    t = responding.Transform(jsonbodies.ListBody(chain(), "Service", max_item=10), fmt="json")
    assert t.response_headers([("Content-Length", "5"), ("Content-Type", "a")]) == [
        ("Content-Type", "a")
    ]


def test_inflation_is_bounded_per_step() -> None:
    bomb = gzip.compress(b" " * (8 << 20))  # 8 MiB of whitespace in a few KiB
    seen = []

    class Sizes:
        counts = jsonbodies.Counts()

        def feed(self, chunk: bytes) -> Any:
            seen.append(len(chunk))
            return iter(())

        def finish(self) -> Any:
            return iter(())

    t = responding.Transform(Sizes(), fmt="json", encoding="gzip")
    list(t.feed(bomb))
    list(t.finish())
    assert sum(seen) == 8 << 20 and max(seen) <= responding.INFLATE_STEP


def test_corrupt_compression_is_a_broken_body() -> None:
    t = responding.Transform(
        jsonbodies.ListBody(chain(), "Service", max_item=10), fmt="json", encoding="gzip"
    )
    with pytest.raises(responding.BrokenBody):
        list(t.feed(b"\x1f\x8b\x08\x00garbage-garbage-garbage"))


def test_undecodable_counts_reach_the_callback() -> None:
    reported: list[tuple[str, int]] = []
    t = responding.Transform(
        jsonbodies.ListBody(chain(), "Service", max_item=1 << 20),
        fmt="json",
        on_undecodable=lambda f, n: reported.append((f, n)),
    )
    list(t.feed(b"garbage"))
    list(t.finish())
    assert reported == [("json", 1)]


# --- the runtime ----------------------------------------------------------------------------------


def hub_settings(**filters: Any) -> settings.HubSettings:
    return settings.HubSettings(
        node_name="node1",
        upstream=settings.UpstreamSettings(servers=("https://127.0.0.1:6443",)),
        filters=settings.FilterSettings(**filters),
    )


def test_runtime_hub_address_and_topology_source() -> None:
    f = filtering.Filters(hub_settings())
    assert f.inputs.hub_address == inputs.Address("127.0.0.1", 10268)
    assert f.inputs.pool_topology is inputs.PoolTopology.NODEPOOL
    f = filtering.Filters(
        hub_settings(enable_pool_service_topology=True, hub_host="169.254.2.1", hub_port=443)
    )
    assert f.inputs.hub_address == inputs.Address("169.254.2.1", 443)
    assert f.inputs.pool_topology is inputs.PoolTopology.NODEBUCKET
    f = filtering.Filters(hub_settings(enable_node_pool=False))
    assert f.inputs.pool_topology is inputs.PoolTopology.NONE


@pytest.mark.parametrize(
    ("kwargs", "pool", "expected"),
    [
        ({}, "", ["services", "node node1", "NodePools"]),
        ({}, "p1", ["services", "NodePools"]),
        ({"enable_pool_service_topology": True}, "p1", ["services", "NodeBuckets"]),
        ({"disabled": ("servicetopology",)}, "", ["node node1"]),
        ({"disabled": ("servicetopology", "nodeportisolation")}, "", []),
        ({"enabled": False}, "", []),
    ],
)
def test_runtime_follows_only_what_active_filters_need(
    kwargs: dict[str, Any], pool: str, expected: list[str]
) -> None:
    s = hub_settings(**kwargs)
    s = settings.HubSettings(
        node_name=s.node_name, nodepool_name=pool, upstream=s.upstream, filters=s.filters
    )
    assert [what for what, *_ in filtering.Filters(s).needed()] == expected


def test_runtime_nodebuckets_selected_by_the_pool_flag() -> None:
    s = settings.HubSettings(
        node_name="n",
        nodepool_name="p1",
        upstream=hub_settings().upstream,
        filters=settings.FilterSettings(enable_pool_service_topology=True),
    )
    ((_, _, _, selector, _),) = [n for n in filtering.Filters(s).needed() if n[0] == "NodeBuckets"]
    assert selector == "openyurt.io/pool-name=p1"


def test_runtime_readiness_waits_for_inputs_but_not_offline_nor_forever() -> None:
    now = [0.0]
    f = filtering.Filters(hub_settings(inputs_sync_timeout=60.0), clock=lambda: now[0])
    f.cloud_healthy = lambda: True
    assert not f.ready()
    f.approver.apply_configmap(None)
    f.inputs.services.replace([])
    f.inputs.node.mark_absent()
    assert not f.ready()  # NodePools still missing
    assert f.not_read() == "reading NodePools (waits at most 60 s)"  # the readyz reason
    f.cloud_healthy = lambda: False
    assert f.not_read() == ""
    assert f.ready()  # offline: the cache answers, missing inputs leave objects unchanged
    f.cloud_healthy = lambda: True
    now[0] = 61.0
    assert f.ready()  # waited long enough: serve anyway (logged once)
    g = filtering.Filters(hub_settings(), clock=lambda: 0.0)
    g.cloud_healthy = lambda: True
    g.approver.apply_configmap(None)
    for _, collection, *_ in g.needed():
        collection.replace([])
    assert g.ready()
    assert filtering.Filters(hub_settings(enabled=False)).ready()


def test_runtime_open_only_for_approved_requests() -> None:
    f = filtering.Filters(hub_settings())
    json = {"Content-Type": "application/json"}
    assert f.open(info(ua="kubectl/v1.30"), 200, json) is None
    assert f.open(info(), 200, json) is not None
    assert f.open(info(), 200, {**json, "Content-Encoding": "br"}) is None
    assert f.open(info(ua="yurthub/edgehub"), 200, json) is None
    assert f.stored(info(ua="kubectl")) is None
    stored = f.stored(info())
    assert stored is not None
    dropped = orjson.dumps(service("x", type_="LoadBalancer", annotations=DISCARD))
    assert stored.item(dropped) is None and stored.object(dropped) == dropped


def test_disabled_filter_names_are_checked() -> None:
    with pytest.raises(settings.ConfigError, match="servicetoplogy"):
        hub_settings(disabled=("servicetoplogy",))
    assert hub_settings(disabled=(registry.WILDCARD,)).filters.disabled == ("*",)


async def test_wait_ready_wakes_on_inputs_and_gives_up_at_the_deadline() -> None:
    f = filtering.Filters(hub_settings(inputs_sync_timeout=30.0))
    f.cloud_healthy = lambda: True
    async with asyncio.TaskGroup() as tg:
        waiter = tg.create_task(f.wait_ready(), name="wait-ready")
        await asyncio.sleep(0.05)
        assert not waiter.done()
        f.apply_configmap(None)
        for _, collection, *_ in f.needed():
            await asyncio.sleep(0.01)
            assert not waiter.done()
            collection.replace([])
    assert f.ready()
    late = filtering.Filters(hub_settings(inputs_sync_timeout=0.2))
    late.cloud_healthy = lambda: True
    async with asyncio.timeout(5):
        await late.wait_ready()  # nothing ever came: served anyway after 0.2 s
    assert late.ready()


POINTING = ["masterservice", "forwardkubesvctraffic", "inclusterconfig", "serviceenvupdater"]


def hub_at(
    *,
    dummy: bool = False,
    bind: str = "127.0.0.1",
    port: int = 10268,
    source: modes.Source = modes.Source.NONE,
    working_mode: settings.WorkingMode = settings.WorkingMode.EDGE,
    **filters: Any,
) -> settings.HubSettings:
    return settings.HubSettings(
        node_name="node1",
        upstream=hub_settings().upstream,
        listen=settings.ListenSettings(
            enable_dummy_if=dummy, bind_proxy_address=bind, proxy_secure_port=port
        ),
        certs=settings.CertSettings(source=source),
        working_mode=working_mode,
        filters=settings.FilterSettings(**filters),
    )


@pytest.mark.parametrize(
    ("hub", "inactive"),
    [
        # The CLI's defaults: loopback, and no serving certificate.
        (hub_at(), POINTING),
        (hub_at(source=modes.Source.KUBECONFIG), POINTING),
        (hub_at(source=modes.Source.JOIN_TOKEN), POINTING),  # a certificate, but loopback
        (hub_at(dummy=True), POINTING),  # the dummy IP, but no secure port to reach there
        (hub_at(dummy=True, source=modes.Source.JOIN_TOKEN, port=0), POINTING),
        (hub_at(bind="0.0.0.0", source=modes.Source.KUBELET), POINTING),
        # YurtHub's way: the dummy interface and a serving certificate.
        (hub_at(dummy=True, source=modes.Source.JOIN_TOKEN), []),
        (hub_at(dummy=True, source=modes.Source.KUBELET), []),
        (hub_at(dummy=True, source=modes.Source.EXISTING), []),
        (hub_at(bind="10.0.0.5", source=modes.Source.BOOTSTRAP_FILE), []),
        # An address named for the pods: the caller vouches for what listens there.
        (hub_at(hub_host="169.254.2.1"), []),
        (hub_at(hub_host="127.0.0.1", hub_port=443), POINTING),  # never loopback
        # Only what would run at all is reported.
        (hub_at(disabled=("masterservice", "inclusterconfig")), POINTING[1::2]),
        (hub_at(working_mode=settings.WorkingMode.CLOUD), ["masterservice", "inclusterconfig"]),
        (hub_at(enabled=False), []),
    ],
)
def test_runtime_filters_pointing_pods_at_the_hub_need_an_address_pods_reach(
    hub: settings.HubSettings, inactive: list[str]
) -> None:
    f = filtering.Filters(hub)
    assert list(f.inactive) == inactive
    assert not set(inactive) & set(f.approver.names)
    status = asyncio.run(f.status())
    assert status["inactive"] == f.inactive
    assert set(status["active"]) == set(f.approver.names)
    if inactive:
        assert all(why == f.inactive[inactive[0]] for why in f.inactive.values())
    # kubelet's services list gets masterservice only where pods reach the hub.
    kubelet = f.approver.approve("kubelet", "list", "services")
    assert ("masterservice" in kubelet) is (
        hub.filters.enabled and "masterservice" not in inactive + list(hub.filters.disabled)
    )


def test_runtime_says_once_why_the_kubernetes_service_is_left_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger=filtering.logger.name):
        f = filtering.Filters(hub_at())
    (line,) = [r.getMessage() for r in caplog.records]
    assert "masterservice" in line and "127.0.0.1 is a loopback address" in line
    assert "--enable-dummy-if" in line and "unchanged" in line
    why = f.inactive["masterservice"]
    assert "127.0.0.1 is a loopback address" in why and "no secure port" in why
    caplog.clear()
    with caplog.at_level("WARNING", logger=filtering.logger.name):
        filtering.Filters(hub_at(dummy=True, source=modes.Source.JOIN_TOKEN))
    assert not caplog.records
