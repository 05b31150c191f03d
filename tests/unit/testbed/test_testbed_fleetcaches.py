"""Whether a hub's cache equals the apiserver (``fleetcaches``): keys, mounts, differences."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from yurthub.testing import fleetcaches, fleetmeasures

POD = "pods.v1.core"
CM = "configmaps.v1.core"
SVC = "services.v1.core"
NODE = "nodes.v1.core"


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("kubelet/pods.v1.core/ns/p", ("kubelet", (POD, "ns", "p"))),
        ("kubelet/nodes.v1.core/n1", ("kubelet", (NODE, "", "n1"))),
        (
            "multiplexer-proxy-n/services.v1.core/default/kubernetes",
            ("multiplexer-proxy-n", (SVC, "default", "kubernetes")),
        ),
        ("kubelet/pods.v1.core?fieldSelector=spec.nodeName%3Dn", None),  # a list record
        ("kubelet/leases.v1.coordination.k8s.io/kube-node-lease/n", None),  # not compared
        ("/version", None),
        ("kubelet/pods.v1.core/ns/", None),
    ],
)
def test_parse_key(key: str, parsed: tuple[str, fleetcaches.ObjectId] | None) -> None:
    assert fleetcaches.parse_key(key) == parsed


def test_pod_mounts_include_projected_sources() -> None:
    pod = {
        "metadata": {"namespace": "ns"},
        "spec": {
            "volumes": [
                {"name": "a", "configMap": {"name": "cfg"}},
                {"name": "b", "secret": {"secretName": "sec"}},
                {"name": "c", "emptyDir": {}},
                {
                    "name": "d",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt"}},
                            {"secret": {"name": "other"}},
                        ]
                    },
                },
            ]
        },
    }
    assert fleetcaches.pod_mounts(pod) == (
        (CM, "ns", "cfg"),
        ("secrets.v1.core", "ns", "sec"),
        (CM, "ns", "kube-root-ca.crt"),
        ("secrets.v1.core", "ns", "other"),
    )


class Api:
    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects

    def get(self, path: str, **query: str) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "50"}, "items": self.objects.get(path, [])}


def obj(name: str, rv: str, namespace: str = "", **extra: Any) -> dict[str, Any]:
    meta = {"name": name, "resourceVersion": rv}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, **extra}


CLOUD = fleetcaches.Cloud.read(
    Api(
        {
            "/api/v1/nodes": [obj("n1", "10"), obj("n2", "11")],
            "/api/v1/pods": [
                obj(
                    "p1",
                    "20",
                    "ns",
                    spec={"nodeName": "n1", "volumes": [{"configMap": {"name": "cfg"}}]},
                ),
                obj("p2", "21", "ns", spec={"nodeName": "n2"}),
            ],
            "/api/v1/configmaps": [obj("cfg", "30", "ns")],
            "/api/v1/services": [obj("s", "40", "ns")],
        }
    )
)


def copies(**versions: str) -> list[fleetcaches.Copy]:
    ids = {
        "node": ("kubelet", (NODE, "", "n1")),
        "pod": ("kubelet", (POD, "ns", "p1")),
        "cfg": ("kubelet", (CM, "ns", "cfg")),
        "svc": ("multiplexer-proxy-n1", (SVC, "ns", "s")),
        "gone": ("kubelet", (POD, "ns", "p0")),
        "other_pod": ("kubelet", (POD, "ns", "p2")),
    }
    return [fleetcaches.Copy(ids[k][0], ids[k][1], rv) for k, rv in versions.items()]


def test_needed_by_a_node() -> None:
    assert CLOUD.needed_by("n1") == {
        (NODE, "", "n1"),
        (POD, "ns", "p1"),
        (CM, "ns", "cfg"),
        (SVC, "ns", "s"),
    }


@pytest.mark.parametrize(
    ("held", "problems"),
    [
        (copies(node="10", pod="20", cfg="30", svc="40"), []),
        (
            copies(node="10", pod="19", cfg="30", svc="40"),
            ["kubelet/pods.v1.core/ns/p1: cached 19, cloud 20"],
        ),
        (copies(node="10", pod="20", cfg="30"), ["services.v1.core/ns/s: not cached"]),
        (
            copies(node="10", pod="20", cfg="30", svc="40", gone="5"),
            ["kubelet/pods.v1.core/ns/p0: deleted in the cloud, cached at 5"],
        ),
        # A pod of another node is no problem while current, stale when not.
        (copies(node="10", pod="20", cfg="30", svc="40", other_pod="21"), []),
        (
            copies(node="10", pod="20", cfg="30", svc="40", other_pod="1"),
            ["kubelet/pods.v1.core/ns/p2: cached 1, cloud 21"],
        ),
        (
            copies(node="?", pod="20", cfg="30", svc="40"),
            ["kubelet/nodes.v1.core/n1: cached ?, cloud 10"],
        ),
        # Changed after the cloud was read, and the hub has the change: ahead, not stale.
        (copies(node="12", pod="25", cfg="30", svc="40"), []),
        # Created after its kind was listed (at 50): no copy of a deleted object.
        (copies(node="10", pod="20", cfg="30", svc="40", gone="51"), []),
        (
            copies(node="10", pod="20", cfg="30", svc="40", gone="50"),
            ["kubelet/pods.v1.core/ns/p0: deleted in the cloud, cached at 50"],
        ),
    ],
)
def test_differences(held: list[fleetcaches.Copy], problems: list[str]) -> None:
    assert fleetcaches.differences(held, CLOUD, "n1") == problems


def test_differences_are_bounded() -> None:
    many = [fleetcaches.Copy("kubelet", (POD, "ns", f"x{i}"), "1") for i in range(30)]
    found = fleetcaches.differences(many, CLOUD, "n1", limit=5)
    assert len(found) == 6 and found[-1].startswith("... and ")


def test_yurthub_files(tmp_path: pathlib.Path) -> None:
    pods = tmp_path / "hollow-kubelet" / POD / "ns"
    pods.mkdir(parents=True)
    (pods / "p1").write_text(json.dumps(obj("p1", "20", "ns")))
    (pods / "broken").write_bytes(b"\x00protobuf")
    leases = tmp_path / "kubelet" / "leases.v1.coordination.k8s.io" / "kube-node-lease"
    leases.mkdir(parents=True)
    (leases / "n1").write_text(json.dumps(obj("n1", "1", "kube-node-lease")))
    found = sorted(fleetcaches.yurthub_copies(tmp_path), key=lambda c: c.oid)
    assert found == [
        fleetcaches.Copy("hollow-kubelet", (POD, "ns", "broken"), "?"),
        fleetcaches.Copy("hollow-kubelet", (POD, "ns", "p1"), "20"),
    ]


def test_a_steady_difference_counts_only_when_it_lasts() -> None:
    first = {
        "n1": ["kubelet/pods.v1.core/ns/p1: cached 10, cloud 11"],
        "n2": ["kubelet/pods.v1.core/ns/p2: not cached"],
        "n3": [],
    }
    later = {
        "n1": ["kubelet/pods.v1.core/ns/p1: cached 10, cloud 12"],  # still behind on p1
        "n2": ["kubelet/pods.v1.core/ns/p9: not cached"],  # another object: in flight
        "n3": ["kubelet/pods.v1.core/ns/p3: cached 1, cloud 2"],
    }
    assert fleetmeasures.still_different(first, later) == {
        "n1": ["kubelet/pods.v1.core/ns/p1: cached 10, cloud 12"]
    }
    assert fleetmeasures.still_different(first, {}) == {}
