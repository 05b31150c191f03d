"""The hub's disk cache and the pure helpers it shares with the simulated apiserver.

``selectors`` (label and field selector parsing and matching) is pure and is
used both here, to answer lists offline, and by ``yurthub.testing.sim``, so the
two can never disagree about which objects a selector covers.
"""
