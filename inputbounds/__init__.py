"""Bounds on caller input, checked before anything walks it: shared by every process.

``nesting`` bounds how deeply JSON and YAML nest (orjson's encoder and Python's frames give
out otherwise). The hub, the discovery agent, the manager and the CLI all check input here,
so they agree on the limits and their messages.

Pure and dependency-free: it imports nothing of ours (``make lint`` enforces it), so every
package may import it although the import contracts keep the hub apart from
``kubecontrol``, ``discovery`` and ``managers``.
"""
