"""What ``/v1/status`` says of a pool-scoped resource's freshness (pure)."""

from __future__ import annotations

import pytest

from yurthub.pool import feedsources, leaderconfigs, runtime

CLOUD = feedsources.Source("cloud", "http://localhost")
LEADER = feedsources.Source(
    "edge-2", "https://10.0.0.2:10269", leaderconfigs.Leader("edge-2", "10.0.0.2")
)
SEEN = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.mark.parametrize(
    ("synced", "source", "healthy", "expected"),
    [
        (True, CLOUD, True, {"synced": True, "readFrom": "cloud", "staleSince": None}),
        (False, CLOUD, True, {"synced": False, "readFrom": "cloud", "staleSince": None}),
        # The cloud is away: the hub's own proxy answers from the cache, nothing new arrives.
        (True, CLOUD, False, {"synced": False, "readFrom": "cache",
                              "staleSince": "2027-01-15T08:00:00Z"}),
        (False, CLOUD, False, {"synced": False, "readFrom": "cache", "staleSince": None}),
        # A leader is read directly: its word counts.
        (True, LEADER, False, {"synced": True, "readFrom": "edge-2", "staleSince": None}),
        (False, None, False, {"synced": False, "readFrom": None, "staleSince": None}),
    ],
)  # fmt: skip
def test_freshness(
    synced: bool, source: feedsources.Source | None, healthy: bool, expected: dict[str, object]
) -> None:
    assert runtime.freshness(synced, source, healthy, SEEN) == expected
