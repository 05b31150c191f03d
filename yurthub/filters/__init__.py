"""Response filters: what kubelet, kube-proxy and coredns see, rewritten for the edge.

YurtHub's seven filters (reference ``yurthub-behaviour.md`` §6), applied to upstream answers
as they stream through the hub and to offline answers from the cache:

- pure decisions: ``registry`` (which filters a request gets), ``inputs`` (what the filters
  know: the node, its pool, the services' topology), one module per filter (an object in, the
  object, a changed copy or ``None`` out), ``chaining`` (several filters over one object,
  failures contained), ``jsonbodies`` / ``protobodies`` (bodies and watch streams, event by
  event);
- I/O: ``following`` (the watches that feed ``inputs``), ``runtime`` (the assembled filters
  the proxy and the cache call through ``proxy/seams.py``).
"""
