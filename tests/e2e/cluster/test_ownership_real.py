"""The field-ownership and metadata-answer checks of ``yurthub.testing.ownershipchecks`` against
the real kube-apiserver: the same requests tests/integration/sim/test_sim_fieldmanagement.py
sends to the simulator, with the same status codes and answer shapes asserted. If this
passes and the simulator's test passes, the simulator answers as the apiserver does."""

from __future__ import annotations

import cluster_support as support
import pytest

from yurthub.testing import ownershipchecks, realcluster

pytestmark = pytest.mark.slow


def test_field_ownership_and_metadata_answers_match(
    real_cluster: realcluster.RealCluster,
) -> None:
    crd = support.REPO / "manifests/crds/instances.akri.sh.yaml"
    real_cluster.kubectl("apply", "-f", str(crd))
    real_cluster.kubectl("wait", "--for=condition=Established", "crd/instances.akri.sh")
    client = ownershipchecks.Client(real_cluster.url, real_cluster.admin_ssl_context())
    ownershipchecks.check_two_managers_conflict_on_a_slot(client, "own-slot-conflict")
    ownershipchecks.check_force_takes_over_a_slot(client, "own-slot-force")
    ownershipchecks.check_managed_fields_on_get(client, "own-managed-get")
    ownershipchecks.check_reapply_without_a_field_removes_it(client, "own-reapply")
    ownershipchecks.check_updates_record_their_manager(client, "own-updaters")
    ownershipchecks.check_metadata_patch_adds_a_finalizer(client, "own-metadata-patch")
    ownershipchecks.check_write_verbs_answer_partial_metadata(client, "own-write-verbs")
    ownershipchecks.check_partial_kinds_fit_the_answer(client)
    kubectl = [
        str(real_cluster.binaries.path("kubectl")),
        "--kubeconfig",
        str(real_cluster.admin_kubeconfig),
    ]
    ownershipchecks.check_kubectl_delete_waits_for_the_finalizer(client, "own-kubectl", kubectl)
