"""The chain: order, drop, failure containment, the once-a-minute error log."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from filter_samples import kubernetes_service, service, world

from yurthub.filters import chaining, objects


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def changed(self, name: str) -> None:
        self.events.append(("changed", name))

    def dropped(self, name: str) -> None:
        self.events.append(("dropped", name))

    def failed(self, name: str) -> None:
        self.events.append(("failed", name))


def boom(obj: objects.Obj, kind: str, w: Any) -> objects.Obj | None:
    raise RuntimeError("filter bug")


@pytest.fixture
def broken_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(chaining.FUNCTIONS, "broken", boom)


def test_unchanged_is_the_same_object_and_changes_are_counted() -> None:
    rec = Recorder()
    chain = chaining.Chain(
        ["masterservice", "discardcloudservice"], world(), errors=chaining.ErrorLog(), observer=rec
    )
    svc = service("svc")
    assert chain.apply(svc, "Service") is svc
    out = chain.apply(kubernetes_service(), "Service")
    assert out is not None and out["spec"]["clusterIP"] == "169.251.2.1"
    assert rec.events == [("changed", "masterservice")]


def test_a_drop_ends_the_chain() -> None:
    rec = Recorder()
    chain = chaining.Chain(
        ["discardcloudservice", "nodeportisolation"],
        world(),
        errors=chaining.ErrorLog(),
        observer=rec,
    )
    assert chain.apply(service("x-tunnel-server-internal-svc", "kube-system"), "Service") is None
    assert rec.events == [("dropped", "discardcloudservice")]


def test_a_failing_filter_costs_only_its_own_rewrite(
    broken_filter: None, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder()
    times = iter([0.0, 1.0, 30.0, 61.0])
    errors = chaining.ErrorLog(clock=lambda: next(times))
    chain = chaining.Chain(["broken", "masterservice"], world(), errors=errors, observer=rec)
    caplog.set_level(logging.ERROR, logger="yurthub.filters.chaining")
    for _ in range(4):
        out = chain.apply(kubernetes_service(), "Service")
        # The object goes on; the next filter still runs.
        assert out is not None and out["spec"]["clusterIP"] == "169.251.2.1"
    assert rec.events.count(("failed", "broken")) == 4
    logged = [r for r in caplog.records if "filter broken failed" in r.getMessage()]
    # at 0 s, then not at 1 s or 30 s, then at 61 s naming the two skipped
    assert len(logged) == 2
    assert "Service default/kubernetes" in logged[0].getMessage()
    assert logged[0].exc_info is not None
    assert "2 more failures" in logged[1].getMessage()


@pytest.mark.parametrize(
    ("names", "body", "may"),
    [
        (["serviceenvupdater"], b'{"spec":{"containers":[{"env":[]}]}}', False),
        (["serviceenvupdater"], b'{"env":[{"name":"KUBERNETES_SERVICE_HOST"}]}', True),
        (["serviceenvupdater"], b"\n\x17KUBERNETES_SERVICE_PORT", True),  # protobuf bytes
        (["serviceenvupdater", "masterservice"], b"{}", True),  # one without needles: always
        ([], b"{}", False),
    ],
)
def test_may_change_skips_bodies_without_the_needles(
    names: list[str], body: bytes, may: bool
) -> None:
    chain = chaining.Chain(names, world(), errors=chaining.ErrorLog())
    assert chain.may_change(body) is may


def test_a_protobuf_item_no_filter_can_change_is_not_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Offline protobuf pod lists go through the filters item by item: pods that cannot hold
    # what serviceenvupdater rewrites pass as the same bytes, never decoded.
    from yurthub.filters import jsonbodies, protobodies
    from yurthub.kubeproto import wire

    decoded: list[str] = []
    original = protobodies.decode_message

    def counting(name: str, data: bytes) -> objects.Obj:
        decoded.append(name)
        return original(name, data)

    monkeypatch.setattr(protobodies, "decode_message", counting)
    chain = chaining.Chain(["serviceenvupdater"], world(), errors=chaining.ErrorLog())
    counts = jsonbodies.Counts()
    d = wire.delimited
    plain = d(1, d(1, b"pod"))  # a Pod whose metadata names it "pod", nothing else
    assert protobodies.filter_item(chain, "Pod", plain, counts) is plain
    assert decoded == [] and counts.objects == 0
    env = d(7, d(1, b"KUBERNETES_SERVICE_HOST") + d(2, b"10.0.0.1"))
    with_env = plain + d(2, d(2, d(1, b"c") + env))  # spec.containers[0].env[0]
    protobodies.filter_item(chain, "Pod", with_env, counts)
    assert decoded[0] == "Pod" and counts.objects == 1  # decoded (its parts too)
