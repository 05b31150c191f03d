"""Checks of server-side apply field ownership and metadata-only answers, for any apiserver.

The same requests go to the simulated apiserver (``tests/integration/sim``) and to the
real kube-apiserver of the test bed (``tests/e2e/cluster``); each check asserts the status
codes and answer shapes the real apiserver gives, so a simulator that passes them behaves
as the real one does for Akri's agent: kube-rs ``patch_metadata`` (finalizers, answered as
``PartialObjectMetadata``) and one apply field manager per node for ``deviceUsage`` slots,
where a second node claiming a taken slot gets 409.

Every check works on its own akri.sh Instance in ``default`` (the CRD of
``manifests/crds/instances.akri.sh.yaml`` must be served) and leaves it deleted.
Synchronous (urllib), so it runs against a ``SimApiserverThread`` or a ``RealCluster``.
Dangers: the kubectl check starts a process; it is always waited for or killed.
"""

from __future__ import annotations

import dataclasses
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

PARTIAL = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
PARTIAL_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
INSTANCES = "/apis/akri.sh/v0/namespaces/default/instances"
USER_AGENT = "ownershipchecks/1.0 (linux/amd64) kubernetes/0000000"
TIMEOUT = 30.0
RETRIES = 10


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: Any

    @property
    def managers(self) -> dict[tuple[str, str], dict[str, Any]]:
        """managedFields of the answered object: (manager, operation) -> fieldsV1."""
        entries = (self.body.get("metadata") or {}).get("managedFields") or []
        return {(e["manager"], e["operation"]): e.get("fieldsV1") or {} for e in entries}


class Client:
    """A minimal JSON client over one TLS context (client certificate of an admin)."""

    def __init__(self, url: str, context: ssl.SSLContext) -> None:
        self.url = url.rstrip("/")
        self.context = context

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
        user_agent: str = USER_AGENT,
    ) -> Answer:
        data = None if body is None else json.dumps(body).encode()
        for _ in range(RETRIES):
            req = urllib.request.Request(self.url + path, data=data, method=method)
            if data is not None:
                req.add_header("Content-Type", content_type)
            req.add_header("Accept", accept)
            req.add_header("User-Agent", user_agent)
            try:
                with urllib.request.urlopen(req, context=self.context, timeout=TIMEOUT) as resp:
                    return Answer(int(resp.status), json.loads(resp.read() or b"null"))
            except urllib.error.HTTPError as e:
                with e:  # its response holds the connection
                    raw = e.read()
                answer = Answer(int(e.code), json.loads(raw) if raw else None)
                wait = str(e.headers.get("Retry-After") or "")
                if answer.status != 429 or not wait.isdigit():
                    return answer
            # As client-go does: a 429 with Retry-After (a new CRD's watch cache still
            # initializing on the real apiserver) is asked again after the time it names.
            time.sleep(min(int(wait), 2))
        return answer

    def apply(
        self, name: str, body: Mapping[str, Any], manager: str, *, force: bool = False, **kw: Any
    ) -> Answer:
        query = {"fieldManager": manager, **({"force": "true"} if force else {})}
        return self.request(
            "PATCH",
            f"{INSTANCES}/{name}?{urllib.parse.urlencode(query)}",
            dict(body),
            content_type=APPLY,
            **kw,
        )

    def purge(self, name: str) -> None:
        """Delete the Instance whatever finalizers it holds."""
        self.request(
            "PATCH", f"{INSTANCES}/{name}", {"metadata": {"finalizers": None}}, content_type=MERGE
        )
        self.request("DELETE", f"{INSTANCES}/{name}")


def instance(name: str, **spec: Any) -> dict[str, Any]:
    body = {"configurationName": "config", "cdiName": "akri.sh/config=abc", "capacity": 2}
    body.update(spec)
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": "default"},
        "spec": body,
    }


def _slots(name: str, usage: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Instance",
        "metadata": {"name": name},
        "spec": {"deviceUsage": dict(usage)},
    }


def _create(client: Client, name: str, **spec: Any) -> Answer:
    client.purge(name)
    created = client.request("POST", INSTANCES, instance(name, **spec))
    assert created.status == 201, created.body
    return created


def _merge_finalizers(client: Client, name: str, finalizers: list[str] | None) -> Answer:
    """A merge patch of the Instance's finalizers (None: remove them all), answered as
    PartialObjectMetadata (kube-rs ``patch_metadata``)."""
    return client.request(
        "PATCH",
        f"{INSTANCES}/{name}",
        {"metadata": {"finalizers": finalizers}},
        content_type=MERGE,
        accept=PARTIAL,
    )


def check_two_managers_conflict_on_a_slot(client: Client, name: str) -> None:
    """Akri's slot claim: node-b applying a slot node-a holds gets 409 naming node-a."""
    _create(client, name, deviceUsage={"slot-0": "", "slot-1": ""})
    try:
        first = client.apply(name, _slots(name, {"slot-0": "node-a"}), "dp-node-a", force=True)
        assert first.status == 200, first.body
        assert first.body["spec"]["deviceUsage"] == {"slot-0": "node-a", "slot-1": ""}
        second = client.apply(name, _slots(name, {"slot-0": "node-b"}), "dp-node-b")
        assert second.status == 409, second.body
        status = second.body
        assert status["kind"] == "Status" and status["reason"] == "Conflict"
        assert status["message"] == (
            'Apply failed with 1 conflict: conflict with "dp-node-a": .spec.deviceUsage.slot-0'
        )
        assert status["details"]["causes"] == [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "dp-node-a"',
                "field": ".spec.deviceUsage.slot-0",
            }
        ]
        got = client.request("GET", f"{INSTANCES}/{name}")
        assert got.body["spec"]["deviceUsage"]["slot-0"] == "node-a", "the 409 wrote nothing"
        # The same value from another manager is no conflict: both own the slot.
        shared = client.apply(name, _slots(name, {"slot-0": "node-a"}), "dp-node-c")
        assert shared.status == 200, shared.body
        slot: dict[str, Any] = {"f:spec": {"f:deviceUsage": {"f:slot-0": {}}}}
        assert shared.managers[("dp-node-a", "Apply")] == slot
        assert shared.managers[("dp-node-c", "Apply")] == slot
        # A conflict with an Update manager names its apiVersion.
        taken = client.apply(name, _slots(name, {"slot-1": "node-b"}), "dp-node-b")
        assert taken.status == 409, taken.body
        assert taken.body["details"]["causes"][0] == {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "ownershipchecks" using akri.sh/v0',
            "field": ".spec.deviceUsage.slot-1",
        }
    finally:
        client.purge(name)


def check_force_takes_over_a_slot(client: Client, name: str) -> None:
    """force=true moves the slot to the new manager; the old one no longer owns it."""
    _create(client, name, deviceUsage={"slot-0": ""})
    try:
        assert client.apply(name, _slots(name, {"slot-0": "node-a"}), "a", force=True).status == 200
        forced = client.apply(name, _slots(name, {"slot-0": "node-b"}), "b", force=True)
        assert forced.status == 200, forced.body
        assert forced.body["spec"]["deviceUsage"]["slot-0"] == "node-b"
        assert forced.managers[("b", "Apply")] == {"f:spec": {"f:deviceUsage": {"f:slot-0": {}}}}
        assert ("a", "Apply") not in forced.managers, "a manager left with nothing is dropped"
        # Now "a" is the one that conflicts.
        again = client.apply(name, _slots(name, {"slot-0": "node-a"}), "a")
        assert again.status == 409 and again.body["details"]["causes"][0]["message"] == (
            'conflict with "b"'
        )
    finally:
        client.purge(name)


def check_managed_fields_on_get(client: Client, name: str) -> None:
    """GET shows managedFields: the creator's Update (with "." for new maps and lists)
    and an applier's Apply entry, FieldsV1 with f:, v: (set) keys."""
    _create(client, name, nodes=["node-a"], deviceUsage={"slot-0": ""})
    try:
        applied = {
            "apiVersion": "akri.sh/v0",
            "kind": "Instance",
            "metadata": {"name": name, "labels": {"owner": "node-b"}},
            "spec": {"nodes": ["node-b"]},
        }
        assert client.apply(name, applied, "node-b").status == 200
        got = client.request("GET", f"{INSTANCES}/{name}")
        assert got.status == 200
        assert got.body["spec"]["nodes"] == ["node-a", "node-b"], "a set list merges"
        entries = got.body["metadata"]["managedFields"]
        assert [(e["manager"], e["operation"]) for e in entries] == [
            ("node-b", "Apply"),
            ("ownershipchecks", "Update"),
        ], "Apply entries sort before Update ones"
        for entry in entries:
            assert entry["apiVersion"] == "akri.sh/v0" and entry["fieldsType"] == "FieldsV1"
            assert entry["time"].endswith("Z")
        assert entries[0]["fieldsV1"] == {
            "f:metadata": {"f:labels": {"f:owner": {}}},
            "f:spec": {"f:nodes": {'v:"node-b"': {}}},
        }
        assert entries[1]["fieldsV1"] == {
            "f:spec": {
                ".": {},
                "f:brokerProperties": {},
                "f:capacity": {},
                "f:cdiName": {},
                "f:configurationName": {},
                "f:deviceUsage": {".": {}, "f:slot-0": {}},
                "f:nodes": {".": {}, 'v:"node-a"': {}},
                "f:shared": {},
            }
        }
    finally:
        client.purge(name)


def check_reapply_without_a_field_removes_it(client: Client, name: str) -> None:
    """A manager re-applying without a field it alone owned removes it; fields others
    also own stay."""
    _create(client, name, deviceUsage={"slot-0": ""})
    try:
        both = _slots(name, {"slot-0": "node-a", "slot-9": "node-a"})
        assert client.apply(name, both, "a", force=True).status == 200
        assert client.apply(name, _slots(name, {"slot-0": "node-a"}), "c").status == 200
        smaller = client.apply(name, {**_slots(name, {}), "spec": {"capacity": 2}}, "a")
        assert smaller.status == 200, smaller.body
        assert smaller.body["spec"]["deviceUsage"] == {"slot-0": "node-a"}, (
            "slot-9 (only a's) is gone, slot-0 (c's too) stays"
        )
        assert smaller.managers[("a", "Apply")] == {"f:spec": {"f:capacity": {}}}
    finally:
        client.purge(name)


def check_updates_record_their_manager(client: Client, name: str) -> None:
    """A merge patch is an Update by ?fieldManager= (else the User-Agent's first word),
    and takes the fields it changes from every other manager."""
    _create(client, name)
    try:
        three = {**_slots(name, {}), "spec": {"capacity": 3}}
        assert client.apply(name, three, "a", force=True).status == 200
        patched = client.request(
            "PATCH", f"{INSTANCES}/{name}", {"spec": {"capacity": 4}}, content_type=MERGE
        )
        assert patched.status == 200, patched.body
        assert ("a", "Apply") not in patched.managers
        assert patched.managers[("ownershipchecks", "Update")]["f:spec"]["f:capacity"] == {}
        named = client.request(
            "PATCH",
            f"{INSTANCES}/{name}?fieldManager=editor",
            {"metadata": {"labels": {"edited": "yes"}}},
            content_type=MERGE,
        )
        assert named.managers[("editor", "Update")] == {
            "f:metadata": {"f:labels": {".": {}, "f:edited": {}}}
        }
        forced = client.request(
            "PATCH", f"{INSTANCES}/{name}?force=true", {"spec": {}}, content_type=MERGE
        )
        assert forced.status == 422 and forced.body["message"] == (
            'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified '
            "for non-apply patch"
        )
        long = client.request(
            "PATCH", f"{INSTANCES}/{name}?fieldManager={'x' * 129}", {}, content_type=MERGE
        )
        assert long.status == 422 and long.body["message"] == (
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Too long: may not be more '
            "than 128 bytes"
        )
    finally:
        client.purge(name)


def check_metadata_patch_adds_a_finalizer(client: Client, name: str) -> None:
    """kube-rs ``patch_metadata``: a merge patch or an apply of metadata only, answered as
    PartialObjectMetadata; each node's ``<node>-fin`` manager owns only its finalizer."""
    _create(client, name)
    try:
        merged = _merge_finalizers(client, name, ["merge.example/keep"])
        assert merged.status == 200, merged.body
        assert merged.body["kind"] == "PartialObjectMetadata"
        assert merged.body["apiVersion"] == "meta.k8s.io/v1"
        assert "spec" not in merged.body
        assert merged.body["metadata"]["finalizers"] == ["merge.example/keep"]
        for node in ("node-a", "node-b"):
            fin = {
                "apiVersion": "akri.sh/v0",
                "kind": "Instance",
                "metadata": {"finalizers": [node]},
            }
            added = client.apply(name, fin, f"{node}-fin", accept=PARTIAL)
            assert added.status == 200, added.body
            assert added.body["kind"] == "PartialObjectMetadata"
        assert added.body["metadata"]["finalizers"] == ["merge.example/keep", "node-a", "node-b"]
        assert added.managers[("node-a-fin", "Apply")] == {
            "f:metadata": {"f:finalizers": {'v:"node-a"': {}}}
        }
        # node-a removes its own: an apply without finalizers.
        removed = client.apply(
            name,
            {"apiVersion": "akri.sh/v0", "kind": "Instance", "metadata": {}},
            "node-a-fin",
            accept=PARTIAL,
        )
        assert removed.status == 200, removed.body
        assert removed.body["metadata"]["finalizers"] == ["merge.example/keep", "node-b"]
    finally:
        client.purge(name)


def check_write_verbs_answer_partial_metadata(client: Client, name: str) -> None:
    """POST, PUT, PATCH and DELETE answer in the form the Accept names, as GET does:
    PartialObjectMetadata or a Table; a DELETE that removes at once answers a Status."""
    client.purge(name)
    created = client.request("POST", INSTANCES, instance(name), accept=PARTIAL)
    try:
        assert created.status == 201, created.body
        assert created.body["kind"] == "PartialObjectMetadata", created.body
        assert created.body["metadata"]["name"] == name and "spec" not in created.body
        current = client.request("GET", f"{INSTANCES}/{name}").body
        current["metadata"]["finalizers"] = ["example.com/hold"]
        put = client.request("PUT", f"{INSTANCES}/{name}", current, accept=PARTIAL)
        assert put.status == 200 and put.body["kind"] == "PartialObjectMetadata", put.body
        table = client.request(
            "PATCH",
            f"{INSTANCES}/{name}",
            {"spec": {"capacity": 5}},
            content_type=MERGE,
            accept=TABLE,
        )
        assert table.status == 200 and table.body["kind"] == "Table", table.body
        assert table.body["rows"][0]["cells"][0] == name
        held = client.request("DELETE", f"{INSTANCES}/{name}", accept=PARTIAL)
        assert held.status == 200 and held.body["kind"] == "PartialObjectMetadata", held.body
        assert held.body["metadata"]["deletionTimestamp"]
        last = _merge_finalizers(client, name, None)
        assert last.status == 200 and last.body["kind"] == "PartialObjectMetadata", last.body
        assert client.request("GET", f"{INSTANCES}/{name}").status == 404
        client.request("POST", INSTANCES, instance(name))
        gone = client.request("DELETE", f"{INSTANCES}/{name}", accept=PARTIAL)
        assert gone.status == 200 and gone.body["kind"] == "Status", gone.body
        assert gone.body["status"] == "Success"
    finally:
        client.purge(name)


def check_partial_kinds_fit_the_answer(client: Client) -> None:
    """PartialObjectMetadata is for one object, PartialObjectMetadataList for a list: the
    other one is 406, even with a plain JSON fallback (the apiserver picks first, then
    finds it cannot convert)."""
    one = "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"
    got = client.request("GET", one, accept=PARTIAL_LIST)
    assert got.status == 406 and got.body["reason"] == "NotAcceptable", got.body
    assert got.body["message"] == (
        "you requested PartialObjectMetadataList, but the requested object is not a list "
        "(*core.ConfigMap)"
    )
    listed = client.request(
        "GET", "/api/v1/namespaces/default/configmaps", accept=f"{PARTIAL},application/json"
    )
    assert listed.status == 406 and listed.body["message"] == (
        "you requested PartialObjectMetadata, but the requested object is a list "
        "(*core.ConfigMapList)"
    )
    custom = client.request("GET", INSTANCES, accept=PARTIAL)
    assert custom.status == 406 and custom.body["message"] == (
        "you requested PartialObjectMetadata, but the requested object is a list "
        "(*unstructured.UnstructuredList)"
    )
    assert client.request("GET", one, accept=PARTIAL).body["kind"] == "PartialObjectMetadata"
    both = client.request("GET", INSTANCES, accept=PARTIAL_LIST)
    assert both.status == 200 and both.body["kind"] == "PartialObjectMetadataList"


def check_kubectl_delete_waits_for_the_finalizer(
    client: Client, name: str, kubectl: Sequence[str]
) -> None:
    """``kubectl delete`` (which waits) returns once a metadata patch removes the last
    finalizer. ``kubectl`` is the argv prefix (binary, --kubeconfig ...)."""
    _create(client, name)
    proc: subprocess.Popen[str] | None = None
    try:
        held = _merge_finalizers(client, name, ["node-a"])
        assert held.status == 200, held.body
        rv = held.body["metadata"]["resourceVersion"]
        proc = subprocess.Popen(
            [*kubectl, "delete", "instances.akri.sh", name, "-n", "default", "--timeout=60s"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for_deletion_mark(client, name, rv)
        released = _merge_finalizers(client, name, None)
        assert released.status == 200 and released.body["kind"] == "PartialObjectMetadata"
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert f'"{name}" deleted' in out
        assert client.request("GET", f"{INSTANCES}/{name}").status == 404
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        client.purge(name)


def _wait_for_deletion_mark(client: Client, name: str, rv: str) -> None:
    """Block on a watch until the Instance carries a deletionTimestamp."""
    query = urllib.parse.urlencode(
        {"watch": "1", "fieldSelector": f"metadata.name={name}", "resourceVersion": rv}
    )
    req = urllib.request.Request(f"{client.url}{INSTANCES}?{query}")
    req.add_header("User-Agent", USER_AGENT)
    with urllib.request.urlopen(req, context=client.context, timeout=TIMEOUT) as resp:
        for line in resp:
            event = json.loads(line)
            if (event.get("object") or {}).get("metadata", {}).get("deletionTimestamp"):
                return
    raise AssertionError(f"the watch on {name} ended before it was marked for deletion")
