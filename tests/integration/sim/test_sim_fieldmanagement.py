"""Server-side apply field ownership and metadata-only answers of the simulated apiserver,
over real HTTP; the same checks run against the real kube-apiserver in
tests/e2e/cluster/test_ownership_real.py, so passing here means behaving as it does."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import yaml

from yurthub.testing import fixtures, ownershipchecks, simapiserver

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[simapiserver.SimApiserverThread]:
    with simapiserver.SimApiserverThread(workdir=tmp_path_factory.mktemp("sim")) as running:
        crd = yaml.safe_load((REPO / "manifests/crds/instances.akri.sh.yaml").read_text())
        running.call(running.sim.state.create, crd)
        yield running


@pytest.fixture
def client(sim: simapiserver.SimApiserverThread) -> ownershipchecks.Client:
    return ownershipchecks.Client(sim.sim.url, sim.sim.client_ssl_context())


def test_two_managers_conflict_on_a_slot(client: ownershipchecks.Client) -> None:
    ownershipchecks.check_two_managers_conflict_on_a_slot(client, "slot-conflict")


def test_force_takes_over_a_slot(client: ownershipchecks.Client) -> None:
    ownershipchecks.check_force_takes_over_a_slot(client, "slot-force")


def test_managed_fields_on_get(client: ownershipchecks.Client) -> None:
    ownershipchecks.check_managed_fields_on_get(client, "managed-get")


def test_reapply_without_a_field_removes_it(client: ownershipchecks.Client) -> None:
    ownershipchecks.check_reapply_without_a_field_removes_it(client, "reapply")


def test_updates_record_their_manager(client: ownershipchecks.Client) -> None:
    ownershipchecks.check_updates_record_their_manager(client, "updaters")


def test_metadata_patch_adds_a_finalizer(client: ownershipchecks.Client) -> None:
    ownershipchecks.check_metadata_patch_adds_a_finalizer(client, "metadata-patch")


def test_write_verbs_answer_partial_metadata(client: ownershipchecks.Client) -> None:
    ownershipchecks.check_write_verbs_answer_partial_metadata(client, "write-verbs")


def test_partial_kinds_fit_the_answer(client: ownershipchecks.Client) -> None:
    ownershipchecks.check_partial_kinds_fit_the_answer(client)


def test_kubectl_delete_waits_for_the_finalizer(
    sim: simapiserver.SimApiserverThread, client: ownershipchecks.Client
) -> None:
    kubectl = [fixtures.KUBECTL, "--kubeconfig", str(sim.sim.kubeconfig_path)]
    ownershipchecks.check_kubectl_delete_waits_for_the_finalizer(client, "kubectl-wait", kubectl)
