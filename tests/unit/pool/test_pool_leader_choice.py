"""Choosing a leader hub: round robin over usable leaders, penalties, and when a feeder must
switch (``feedsources.Sources``). No sockets: the TCP check results are recorded directly."""

from __future__ import annotations

from yurthub import following
from yurthub.pool import feedsources, leaderconfigs, leaders

A = leaderconfigs.Leader("edge-1", "10.0.0.1")
B = leaderconfigs.Leader("edge-2", "10.0.0.2")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def checked(pool: leaders.Leaders, **healthy: bool) -> None:
    found = pool.leaders
    pool._record(found, [healthy.get(leader.node.replace("-", "_"), False) for leader in found])


async def test_round_robin_over_usable_leaders_and_penalties() -> None:
    clock = Clock()
    changes: list[int] = []
    pool = leaders.Leaders(10269, penalty=30.0, clock=clock, on_change=lambda: changes.append(1))
    pool.update((A, B))
    assert changes and pool.pick() is None  # not checked yet: nobody is usable
    checked(pool, edge_1=True, edge_2=True)
    assert [pool.pick(), pool.pick(), pool.pick()] == [A, B, A]
    pool.penalize(B, "garbage")
    assert not pool.usable(B) and [pool.pick(), pool.pick()] == [A, A]
    assert pool.healthy() == {A: True, B: False}
    clock.now += 31
    assert pool.usable(B)
    pool.penalize(A, "busy", 3.0)
    clock.now += 2
    assert not pool.usable(A)
    clock.now += 2
    assert pool.usable(A)
    checked(pool, edge_1=False, edge_2=True)
    assert pool.pick() == B and pool.pick() == B
    before = len(changes)
    pool.update((A, B))  # the same set: nothing changes
    assert len(changes) == before
    pool.update((B,))
    assert pool.healthy() == {B: True}
    pool.penalize(A, "not ours any more")  # ignored


async def test_sources_switch_only_when_the_choice_must_change() -> None:
    pool = leaders.Leaders(10269)
    sources = feedsources.Sources(
        lambda: following.ProxyRoute("http://127.0.0.1:10261"), pool, leader_tls=True
    )
    cloud = sources.choose()
    assert cloud.leader is None and cloud.base == "http://127.0.0.1:10261"
    pool.update((A, B))
    checked(pool, edge_1=True, edge_2=True)
    assert sources.still_good(cloud)  # api mode: the cloud it is
    generation = sources.generation
    sources.set_mode(leaderconfigs.Source.POOL)
    assert sources.generation > generation
    assert not sources.still_good(cloud)  # a leader is usable now
    first = sources.choose()
    assert first.leader == A and first.base == "https://10.0.0.1:10269"
    pool.penalize(B, "hang")
    assert sources.still_good(first)  # another leader's trouble is not ours
    pool.penalize(A, "hang")
    assert not sources.still_good(first)
    assert sources.choose().leader is None
    plain = feedsources.Sources(
        lambda: following.ProxyRoute(""), leaders.Leaders(7), leader_tls=False
    )
    assert plain.leader_source(A).base == "http://10.0.0.1:7"
