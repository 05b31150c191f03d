"""Pool scope: the multiplexer and the leader hub (reference ``yurthub-behaviour.md`` §8).

- ``gvrs``, ``leaderconfigs``, ``rvrules``, ``selection``, ``watchcache``, ``encoding``: pure
  decisions and data (table-tested).
- ``feeding``: one upstream list + watch per pool-scoped resource (from a leader hub, else the
  cloud through the hub's own proxy).
- ``serving``: local list/watch clients answered from memory.
- ``leaders``: the leader hubs' health (TCP probe, penalties after bad answers) and choice.
- ``multiplexer``: the per-resource stores and feeders, replaced live.
- ``metering``: the multiplexer's and the pool's metrics.
- ``runtime``: the ``leader-hub-<pool>`` ConfigMap followed, the multiplexer port served; the
  router's ``seams.PoolServer``.
"""
