"""Internals of the simulated kube-apiserver; the public facade is ``yurthub.testing.simapiserver``.

Layout: ``resources`` (kind registry), ``storage`` (the store: resourceVersions, events,
the controllers' visible effects) over ``objects`` and ``watchers`` (its data types),
``updating`` and ``crds`` (what a write computes); ``selectors`` live in
``yurthub.cache.selectors``; ``patching``, ``tables``, ``discoverydocs``,
``negotiation``, ``paging``, ``paths``, ``schemas``, ``conversion``, ``defaulting``,
``objectmeta`` are pure; ``handlers`` (app + dispatch), ``crud``, ``watching``,
``subresources``, ``execing`` are the HTTP layer; ``pki``/``auth``/``kubeconfigs``
the identity side; ``seeding`` the demo and scale clusters; ``podlogs`` log lines.
"""
