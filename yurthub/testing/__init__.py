"""The public test toolkit: a simulated kube-apiserver (``simapiserver``) and pytest fixtures
(``fixtures``; enable with ``pytest_plugins = ["yurthub.testing.fixtures"]``).

Users import it for their own offline-mode integration tests; nothing here runs
unless a test starts it.
"""
