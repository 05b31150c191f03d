"""Capture, from a real kube-apiserver, the same lists as protobuf and as JSON (the fixtures of
tests/unit/test_kubeproto_converting.py).

Usage: python tests/data/kubeproto/capture.py CLUSTER_DIR (a cluster from ``edgehub cluster up``
with a hollow node and some workloads; see the test's docstring). Each resource is fetched in
both representations until both carry the same resourceVersion (leases and nodes move).
"""

from __future__ import annotations

import json
import pathlib
import ssl
import sys
import urllib.request

from yurthub.testing import realcluster

HERE = pathlib.Path(__file__).resolve().parent
PROTOBUF = "application/vnd.kubernetes.protobuf"
PATHS = {
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    "services": "/api/v1/services",
    "endpoints": "/api/v1/endpoints",
    "endpointslices": "/apis/discovery.k8s.io/v1/endpointslices",
    "configmaps": "/api/v1/configmaps",
    "secrets": "/api/v1/secrets",
    "leases": "/apis/coordination.k8s.io/v1/leases",
    "namespaces": "/api/v1/namespaces",
    "serviceaccounts": "/api/v1/serviceaccounts",
    "events": "/api/v1/events",
    "eventsv1": "/apis/events.k8s.io/v1/events",
    "deployments": "/apis/apps/v1/deployments",
    "replicasets": "/apis/apps/v1/replicasets",
    "jobs": "/apis/batch/v1/jobs",
    "clusterroles": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "priorityclasses": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "flowschemas": "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
    "pv": "/api/v1/persistentvolumes",
    "pvc": "/api/v1/persistentvolumeclaims",
    "csidrivers": "/apis/storage.k8s.io/v1/csidrivers",
    "runtimeclasses": "/apis/node.k8s.io/v1/runtimeclasses",
    "volumeattachments": "/apis/storage.k8s.io/v1/volumeattachments",
    # A streaming list of a watch (client-go's WatchList): initial ADDED events, then the
    # BOOKMARK annotated k8s.io/initial-events-end; the server ends it after timeoutSeconds.
    "watch-configmaps": "/api/v1/configmaps?watch=1&sendInitialEvents=true"
    "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1",
}


def fetch(cluster: realcluster.RealCluster, ctx: ssl.SSLContext, path: str, accept: str) -> bytes:
    request = urllib.request.Request(cluster.url + path, headers={"Accept": accept})
    with urllib.request.urlopen(request, context=ctx, timeout=10) as response:
        body: bytes = response.read()
        return body


def main() -> None:
    cluster = realcluster.RealCluster.attach(pathlib.Path(sys.argv[1]))
    ctx = cluster.admin_ssl_context()
    for name, path in PATHS.items():
        for _ in range(20):
            as_json = fetch(cluster, ctx, path, "application/json")
            as_pb = fetch(cluster, ctx, path, PROTOBUF)
            again = fetch(cluster, ctx, path, "application/json")
            if as_json == again:
                break
        else:
            raise SystemExit(f"{name}: keeps changing")
        if name.startswith("watch-"):
            # One JSON event per line; initial events come in an order of their own: by key.
            (HERE / f"{name}.json").write_bytes(as_json)
        else:
            (HERE / f"{name}.json").write_bytes(json.dumps(json.loads(as_json), indent=1).encode())
        (HERE / f"{name}.pb").write_bytes(as_pb)
        print(name, len(as_json), len(as_pb))


if __name__ == "__main__":
    main()
