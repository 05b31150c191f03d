"""Shared pieces of the tee tests: kubelet's pods, a tee over a store, what it cached."""

from __future__ import annotations

from yurthub.cache import agents, keys, store, teeing

KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"
PODS = keys.Scope("kubelet", "pods", "v1")


def pod(name: str, rv: int, namespace: str = "d") -> dict[str, object]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)},
        "spec": {"nodeName": "n"},
    }


def tee_for(cache: store.Store, max_body: int = 1 << 20) -> teeing.Tee:
    return teeing.Tee(
        cache, agents.AgentSet(node_name="n"), max_body_bytes=max_body, max_event_bytes=1 << 20
    )


def names(cache: store.Store) -> list[str]:
    """The names of the pods cached for kubelet."""
    return [k.name for k, _ in cache.objects(PODS)]
