"""An Akri user's Configurations apply unchanged to the real apiserver with edgehub's CRDs.

Akri v0.13's Configuration CRD validates little (the property name pattern, one of
value/valueFrom, the ConfigMap/Secret name): Configurations written for it (capacity 0 or
5000, no ``discoveryHandler.name``, a key selector without ``key``, ``brokerSpec: {}``) are
stored there, so they must be stored with ours too. Only the real apiserver enforces a CRD's
schema (the simulator does not), hence this module. What edgehub checks beyond Akri's schema
is the webhook's, with a message (``test_brokers_real.py``,
``test_the_webhook_refuses_broken_configurations_naming_the_field``); here no webhook runs.
"""

from __future__ import annotations

import json
from typing import Any

import cluster_support as support
import pytest

from yurthub.testing import realcluster

pytestmark = pytest.mark.slow


def akri_configuration(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


ECHO = {"name": "debugEcho", "discoveryDetails": "descriptions: [a]"}

APPLIES_WITH_AKRIS_CRD = [
    akri_configuration("akri-capacity-0", discoveryHandler=ECHO, capacity=0),
    akri_configuration("akri-capacity-5000", discoveryHandler=ECHO, capacity=5000),
    akri_configuration("akri-capacity-negative", discoveryHandler=ECHO, capacity=-1),
    akri_configuration("akri-no-handler-name", discoveryHandler={"discoveryDetails": ""}),
    akri_configuration("akri-empty-handler-name", discoveryHandler={"name": ""}),
    akri_configuration("akri-no-spec-fields"),
    akri_configuration(
        "akri-key-selector-without-key",
        discoveryHandler={
            **ECHO,
            "discoveryProperties": [
                {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cm"}}},
                {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s"}}},
            ],
        },
    ),
    akri_configuration(
        "akri-both-refs",
        discoveryHandler={
            **ECHO,
            "discoveryProperties": [
                {
                    "name": "P",
                    "valueFrom": {
                        "configMapKeyRef": {"name": "cm", "key": "k"},
                        "secretKeyRef": {"name": "s", "key": "k"},
                    },
                }
            ],
        },
    ),
    akri_configuration("akri-empty-broker-spec", discoveryHandler=ECHO, brokerSpec={}),
    akri_configuration(
        "akri-both-broker-kinds",
        discoveryHandler=ECHO,
        brokerSpec={
            "brokerPodSpec": {"containers": [{"name": "b", "image": "x"}]},
            "brokerJobSpec": {"template": {"spec": {"containers": [{"name": "j"}]}}},
        },
    ),
]


def test_akri_configurations_apply_with_our_crds(real_cluster: realcluster.RealCluster) -> None:
    cluster = real_cluster
    for crd in ("configurations.akri.sh.yaml", "instances.akri.sh.yaml"):
        cluster.kubectl("apply", "-f", str(support.REPO / "manifests" / "crds" / crd))
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/configurations.akri.sh", "--timeout=30s"
    )
    try:
        for doc in APPLIES_WITH_AKRIS_CRD:
            name = doc["metadata"]["name"]
            result = cluster.kubectl("apply", "-f", "-", input=json.dumps(doc), check=False)
            assert result.returncode == 0, (name, result.stderr)
        stored = json.loads(cluster.kubectl("get", "akric", "-n", "default", "-o", "json").stdout)[
            "items"
        ]
        by_name = {c["metadata"]["name"]: c for c in stored}
        assert set(by_name) >= {d["metadata"]["name"] for d in APPLIES_WITH_AKRIS_CRD}
        # Stored as given, with the defaults Akri's readers apply.
        assert by_name["akri-capacity-5000"]["spec"]["capacity"] == 5000
        assert by_name["akri-no-spec-fields"]["spec"]["capacity"] == 1
        (cm, _) = by_name["akri-key-selector-without-key"]["spec"]["discoveryHandler"][
            "discoveryProperties"
        ]
        assert cm["valueFrom"]["configMapKeyRef"] == {
            "name": "cm",
            "namespace": "default",
            "optional": False,
        }
        # What Akri's CRD refuses, ours refuses too: a property name its pattern rejects.
        bad = akri_configuration(
            "akri-bad-property-name",
            discoveryHandler={**ECHO, "discoveryProperties": [{"name": "1x", "value": "v"}]},
        )
        result = cluster.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
        assert result.returncode != 0 and "discoveryProperties[0].name" in result.stderr
    finally:
        for doc in APPLIES_WITH_AKRIS_CRD:
            cluster.kubectl(
                "delete",
                "akric",
                doc["metadata"]["name"],
                "-n",
                "default",
                "--wait=false",
                check=False,
            )
