"""The hub's request path: routing, remote (upstream streaming), upgrades, offline answers.

``routing`` dispatches; ``remote`` streams to and from a healthy apiserver; ``upgrading`` pumps
raw bytes for exec/attach/port-forward; ``headers`` holds the pure header rules; ``seams`` the
Protocols the cache implements (``local`` is the cache engineer's offline answerer).
"""
