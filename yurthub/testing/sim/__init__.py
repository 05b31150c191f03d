"""Internals of the simulated kube-apiserver; the public facade is ``yurthub.testing.simapiserver``.

Layout: ``resources`` (kind registry), ``storage`` (objects, resourceVersions, events,
watchers, the controllers' visible effects), ``selectors`` live in
``yurthub.cache.selectors``; ``patching``, ``tables``, ``discoverydocs``,
``negotiation``, ``paging``, ``paths``, ``schemas``, ``conversion``, ``defaulting``,
``objectmeta`` are pure; ``handlers`` (app + dispatch), ``crud``, ``watching``,
``subresources``, ``execing`` are the HTTP layer; ``pki``/``auth``/``kubeconfigs``
the identity side; ``seeding`` the demo and scale clusters; ``podlogs`` log lines.
"""
