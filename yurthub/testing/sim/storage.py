"""The simulated cluster's object store: objects, one global resourceVersion, events, watchers.

``State`` is the etcd of the simulation plus the controllers whose effects a
client can observe immediately: namespace deletion, garbage collection by
ownerReferences, finalizers, CRDs starting and stopping to be served, CSR
signing. Several apiservers may share one ``State`` (two apiservers, one etcd).

Invariants:

- Every write bumps the one global resourceVersion counter and appends exactly
  one event to a bounded history; a no-op update writes nothing.
- A stored object is never mutated: a write stores a new ``Stored`` with the
  object's JSON bytes encoded once, so lists and watches are byte concatenation.
- All methods are synchronous and run on the event loop thread, so a watcher
  registered in the same call that snapshots the history misses nothing.
- Watchers have bounded queues; one that falls behind is closed (the client
  re-watches), never allowed to grow memory.

Two API levels: the ``*_object`` methods take a ``ResourceType`` and are what the
HTTP layer calls; ``create``/``get``/``update``/``delete``/``list``/``apply`` take
plain dicts and resource names for tests that mutate the cluster directly.

The data types are ``objects`` (``Stored``, ``Bucket``, ``Event``, ``Filter``) and
``watchers``; what a write computes lives in ``updating`` (PUT merging) and ``crds`` (CRD
acceptance). Their names are re-exported here for the callers that spell them
``storage.Stored`` and so on.
"""

from __future__ import annotations

import collections
import copy
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from yurthub import statuses
from yurthub.cache import selectors
from yurthub.testing.sim import (
    auth,
    bootstraptokens,
    certificates,
    conversion,
    crds,
    defaulting,
    errors,
    fieldmanaging,
    objectmeta,
    objects,
    paging,
    pki,
    podlifecycle,
    podlogs,
    resources,
    schemas,
    updating,
    watchers,
)

log = logging.getLogger(__name__)

Key = objects.Key
GroupResource = objects.GroupResource
ADDED, MODIFIED, DELETED = objects.ADDED, objects.MODIFIED, objects.DELETED
Stored = objects.Stored
Bucket = objects.Bucket
Event = objects.Event
Filter = objects.Filter
ListResult = objects.ListResult
freeze = objects.freeze
keys_in = objects.keys_in
Watcher = watchers.Watcher
WatcherClosed = watchers.WatcherClosed
WatchStart = watchers.WatchStart
CRD_STORAGE: GroupResource = ("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACES: GroupResource = ("", "namespaces")
SERVICEACCOUNTS: GroupResource = ("", "serviceaccounts")
SECRETS: GroupResource = ("", "secrets")
CONFIGMAPS: GroupResource = ("", "configmaps")
PODS: GroupResource = ("", "pods")
NODES: GroupResource = ("", "nodes")
FIRST_RESOURCE_VERSION = 1000
DEFAULT_HISTORY_SIZE = 10_000
DEFAULT_WATCH_QUEUE_SIZE = 10_000


def _shape(rt: resources.ResourceType) -> fieldmanaging.Shape:
    return fieldmanaging.shape_for(rt.kind, rt.schema, custom=rt.custom)


def _decoded(managed_fields: Any) -> list[fieldmanaging.Entry] | None:
    """Stored or sent managedFields; None when they do not decode (then they are ignored)."""
    try:
        return fieldmanaging.decode(managed_fields)
    except ValueError:
        return None


def _untimed(managed_fields: Any) -> Any:
    if not isinstance(managed_fields, list):
        return managed_fields
    return [
        {k: v for k, v in e.items() if k != "time"} if isinstance(e, dict) else e
        for e in managed_fields
    ]


class State:
    """The shared cluster state behind one or more simulated apiservers."""

    def __init__(
        self,
        *,
        history_size: int = DEFAULT_HISTORY_SIZE,
        watch_queue_size: int = DEFAULT_WATCH_QUEUE_SIZE,
        clock: Callable[[], float] = time.time,
        simulate_kubelets: bool = True,
    ) -> None:
        """``simulate_kubelets``: new Pending pods are scheduled and started (podlifecycle)."""
        self.clock = clock
        self.simulate_kubelets = simulate_kubelets
        self._node_load: collections.Counter[str] = collections.Counter()
        self._pod_ips = 0
        self.registry = resources.Registry()
        self.authority = pki.Authority.create()
        self.tokens = auth.TokenIssuer()
        self.admin_token = secrets.token_urlsafe(32)
        # token -> user, for kubeconfigs written with auth="token" (a --token-auth-file).
        self.static_tokens: dict[str, auth.User] = {}
        self.logs = podlogs.LogBook(clock)
        self.allocator = defaulting.Allocator()
        self.watch_queue_size = watch_queue_size
        self._rv = FIRST_RESOURCE_VERSION
        self._buckets: dict[GroupResource, Bucket] = {}
        self._history: collections.deque[Event] = collections.deque(maxlen=max(1, history_size))
        # Watches and continue tokens older than this cannot be served (410 Gone).
        self._compacted = FIRST_RESOURCE_VERSION
        self._watchers: set[Watcher] = set()
        self._by_uid: dict[str, tuple[GroupResource, Key]] = {}
        self._dependents: dict[str, set[tuple[GroupResource, Key]]] = {}
        self._signing = False

    # --- basics ----------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def oldest_resource_version(self) -> int:
        """The oldest resourceVersion a watch or a continue token may still start from."""
        return self._compacted

    def _bucket(self, storage: GroupResource) -> Bucket:
        bucket = self._buckets.get(storage)
        if bucket is None:
            bucket = Bucket()
            self._buckets[storage] = bucket
        return bucket

    def _key(self, rt: resources.ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rt.namespaced else "", name)

    def _now(self) -> str:
        return objectmeta.timestamp(self.clock())

    def _commit(
        self,
        storage: GroupResource,
        key: Key,
        obj: dict[str, Any],
        kind: str,
        prev: Stored | None,
    ) -> Stored:
        self._rv += 1
        stored = freeze(storage[1], obj, self._rv)
        bucket = self._bucket(storage)
        if kind == DELETED:
            bucket.remove(key)
        else:
            bucket.put(key, stored)
        self._index(storage, key, prev, None if kind == DELETED else stored)
        event = Event(kind, storage, key, stored, prev)
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        self._history.append(event)
        for watcher in list(self._watchers):
            watcher.offer(event)
        if not self._signing and (
            (storage == SECRETS and key[0] == bootstraptokens.NAMESPACE)
            or (storage == CONFIGMAPS and key == bootstraptokens.CLUSTER_INFO)
        ):
            self._resign_cluster_info()
        return stored

    def _resign_cluster_info(self) -> None:
        """The bootstrapsigner: cluster-info carries a signature per signing token."""
        cm = self._bucket(CONFIGMAPS).items.get(bootstraptokens.CLUSTER_INFO)
        if cm is None:
            return
        data = dict(cm.obj.get("data") or {})
        secrets = [
            s.obj
            for k, s in self._bucket(SECRETS).items.items()
            if k[0] == bootstraptokens.NAMESPACE
        ]
        signed = bootstraptokens.signed_data(data, secrets, self.clock())
        if signed == data:
            return
        new = cm.copy()
        new["data"] = signed
        self._signing = True
        try:
            self._commit(CONFIGMAPS, bootstraptokens.CLUSTER_INFO, new, MODIFIED, cm)
        finally:
            self._signing = False

    def ensure_cluster_info(self, server: str) -> None:
        """kubeadm's ``kube-public/cluster-info`` (server + CA), if the cluster has none."""
        rt = self.registry.get("", "v1", "configmaps")
        namespace, name = bootstraptokens.CLUSTER_INFO
        if rt is None or self.find(rt, namespace, name) is not None:
            return
        if self._bucket(NAMESPACES).items.get(("", namespace)) is None:
            return  # a cluster without kube-public (a test's bare state) has no cluster-info
        self.create_object(
            rt,
            {
                "metadata": {"name": name, "namespace": namespace},
                "data": {
                    "kubeconfig": bootstraptokens.cluster_info_kubeconfig(
                        server, self.authority.cert_pem
                    )
                },
            },
            namespace=namespace,
        )

    def bootstrap_user(self, token: str) -> auth.User | None:
        """The user a bootstrap token authenticates as, or None."""
        secrets = (
            s.obj
            for k, s in self._bucket(SECRETS).items.items()
            if k[0] == bootstraptokens.NAMESPACE
        )
        return bootstraptokens.authenticate(token, secrets, self.clock())

    def _index(
        self, storage: GroupResource, key: Key, old: Stored | None, new: Stored | None
    ) -> None:
        ref = (storage, key)
        if old is not None:
            if new is None:
                self._by_uid.pop(old.uid, None)
            for uid in updating.owner_uids(old.obj):
                deps = self._dependents.get(uid)
                if deps is not None:
                    deps.discard(ref)
                    if not deps:
                        del self._dependents[uid]
        if new is not None:
            self._by_uid[new.uid] = ref
            for uid in updating.owner_uids(new.obj):
                self._dependents.setdefault(uid, set()).add(ref)

    # --- typed API (the HTTP layer) -------------------------------------------------------

    def find(self, rt: resources.ResourceType, namespace: str | None, name: str) -> Stored | None:
        return self._bucket(rt.storage).items.get(self._key(rt, namespace, name))

    def get_object(self, rt: resources.ResourceType, namespace: str | None, name: str) -> Stored:
        found = self.find(rt, namespace, name)
        if found is None:
            raise errors.not_found(rt.resource, name, rt.group)
        return found

    def _check_namespace(self, rt: resources.ResourceType, namespace: str, name: str) -> None:
        ns = self._bucket(NAMESPACES).items.get(("", namespace))
        if ns is None:
            raise errors.not_found("namespaces", namespace)
        if ns.deleting:
            raise errors.ApiError(
                statuses.failure(
                    403,
                    f'{rt.resource} "{name}" is forbidden: unable to create new content in '
                    f"namespace {namespace} because it is being terminated",
                    details={"name": name, "kind": rt.resource},
                )
            )

    def _prepare_body(
        self, rt: resources.ResourceType, obj: Any, namespace: str | None
    ) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the body of the request is not a {rt.kind} object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version is not None and api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        if kind is not None and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        meta = obj.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        # The apiserver's field order: kind, apiVersion, metadata, then the rest.
        rest = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion", "metadata")}
        obj.clear()
        obj.update(kind=rt.kind, apiVersion=rt.api_version, metadata=meta, **rest)
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace is not None and body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        return conversion.to_storage(rt, obj)

    def create_object(
        self,
        rt: resources.ResourceType,
        obj: Any,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        field_validation: str | None = None,
        warnings: list[str] | None = None,
        writer: fieldmanaging.Writer | None = None,
        managed: list[fieldmanaging.Entry] | None = None,
    ) -> Stored:
        """Create; ``warnings`` collects what a ``Warning`` header should say. ``writer`` (an
        Update) records its fields in managedFields; ``managed`` are an apply's entries."""
        obj = self._prepare_body(rt, obj, namespace)
        meta = obj["metadata"]
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(
                    rt.kind, "", "metadata.name: Required value: name or generateName is required"
                )
            name = objectmeta.generate_name(str(prefix))
        name = str(name)
        meta["name"] = name
        objectmeta.validate_name(rt, name)
        objectmeta.validate_metadata(rt, meta, name)
        objectmeta.drop_empty(meta)
        if rt.namespaced:
            self._check_namespace(rt, meta["namespace"], name)
        key = self._key(rt, meta.get("namespace"), name)
        if key in self._bucket(rt.storage).items:
            raise errors.ApiError(statuses.already_exists(rt.resource, name, rt.group))
        objectmeta.strip_server_fields(meta)
        meta["uid"] = objectmeta.new_uid()
        meta["creationTimestamp"] = self._now()
        if rt.has_generation:
            meta["generation"] = 1
        if rt.custom:
            updating.validate_fields(schemas.apply(rt, obj), field_validation, warnings)
        else:
            defaulting.on_create(rt, obj, self.allocator)
        if rt.storage == CRD_STORAGE:
            crds.accept(obj, self._now(), self.registry)
        elif rt.storage == certificates.STORAGE:
            certificates.validate_create(obj)
        if managed is None and writer is not None:
            managed = fieldmanaging.update(
                _shape(rt), None, obj, [], writer, self.clock(), has_status=rt.has_status
            )
        if managed:
            meta["managedFields"] = fieldmanaging.encode(managed)
        if dry_run:
            return freeze(rt.resource, obj, 0)
        if rt.storage == CRD_STORAGE:
            self.registry.install_crd(obj)
        stored = self._commit(rt.storage, key, obj, ADDED, None)
        if rt.storage == NAMESPACES:
            self._populate_namespace(name)
        elif rt.storage == PODS and self.simulate_kubelets:
            self._run_pod(key)
        owners = updating.owner_uids(obj)
        if owners and not any(uid in self._by_uid for uid in owners):
            # Every owner is already gone: the garbage collector would remove it at once.
            self._remove(rt.storage, key, cascade=True)
        return stored

    def update_object(
        self,
        rt: resources.ResourceType,
        obj: Any,
        *,
        namespace: str | None,
        name: str,
        subresource: str | None = None,
        full: bool = False,
        dry_run: bool = False,
        field_validation: str | None = None,
        warnings: list[str] | None = None,
        writer: fieldmanaging.Writer | None = None,
        managed: list[fieldmanaging.Entry] | None = None,
    ) -> tuple[Stored, bool]:
        """PUT semantics; returns (stored, created). ``full`` replaces status too (tests).

        managedFields: ``managed`` (an apply's entries) are stored as given; a ``writer``
        (an Update) is recorded over the body's managedFields when it carries any (a
        client may rewrite them), else the stored ones; with neither they are kept."""
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the body of the request is not a {rt.kind} object")
        body_name = (obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None
        if body_name is not None and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        key = self._key(rt, namespace, name)
        old = self._bucket(rt.storage).items.get(key)
        if old is None:
            if rt.allow_create_on_update and subresource is None:
                obj.setdefault("metadata", {})["name"] = name
                created = self.create_object(
                    rt,
                    obj,
                    namespace=namespace,
                    dry_run=dry_run,
                    field_validation=field_validation,
                    warnings=warnings,
                    writer=writer,
                    managed=managed,
                )
                return created, True
            raise errors.not_found(rt.resource, name, rt.group)
        obj = self._prepare_body(rt, obj, namespace)
        meta = obj["metadata"]
        objectmeta.validate_metadata(rt, meta, name)
        self._check_preconditions(rt, old, meta.get("uid"), meta.get("resourceVersion"))
        sent_fields = meta.get("managedFields")
        new = updating.merge_update(rt, old, obj, subresource, full)
        if rt.storage == certificates.STORAGE:
            # Every CSR update path keeps the spec (the request is what was approved).
            new["spec"] = copy.deepcopy(old.obj.get("spec"))
            if not full:  # ``full`` is the test hook that writes anything
                certificates.validate_update(old.obj, new, subresource)
            certificates.stamp_conditions(old.obj, new, self._now())
        objectmeta.drop_empty(new["metadata"])
        if rt.custom:
            updating.validate_fields(schemas.apply(rt, new), field_validation, warnings)
        defaulting.on_write(rt, new)
        if rt.storage == ("", "services"):
            updating.keep_cluster_ip(old.obj, new)
        if rt.has_generation and updating.spec_part(new) != updating.spec_part(old.obj):
            new["metadata"]["generation"] = int(old.meta.get("generation") or 1) + 1
        if rt.storage == CRD_STORAGE:
            crds.accept(new, self._now(), self.registry)
        self._record_fields(rt, old, new, sent_fields, subresource, writer, managed)
        if updating.same_ignoring_rv(new, old.obj):
            return old, False
        if dry_run:
            return freeze(rt.resource, new, 0), False
        if rt.storage == CRD_STORAGE:
            self.registry.install_crd(new)
        stored = self._commit(rt.storage, key, new, MODIFIED, old)
        if stored.deleting and not stored.meta.get("finalizers"):
            self._remove(rt.storage, key, cascade=True)
        return stored, False

    def _record_fields(
        self,
        rt: resources.ResourceType,
        old: Stored,
        new: dict[str, Any],
        sent: Any,
        subresource: str | None,
        writer: fieldmanaging.Writer | None,
        managed: list[fieldmanaging.Entry] | None,
    ) -> None:
        """Set ``new``'s managedFields (see ``update_object``); timestamps alone never make
        a write."""
        meta = new["metadata"]
        before = old.meta.get("managedFields")
        if managed is None and writer is not None:
            entries = _decoded(sent) if sent and not subresource else None
            if entries is None:
                entries = _decoded(before) or []
            managed = fieldmanaging.update(
                _shape(rt), old.obj, new, entries, writer, self.clock(), has_status=rt.has_status
            )
        encoded = fieldmanaging.encode(managed) if managed is not None else before
        if encoded and before and _untimed(encoded) == _untimed(before):
            encoded = before
        if encoded:
            meta["managedFields"] = copy.deepcopy(encoded)
        else:
            meta.pop("managedFields", None)

    def _check_preconditions(
        self, rt: resources.ResourceType, old: Stored, uid: Any, rv: Any
    ) -> None:
        name = str(old.meta.get("name"))
        if uid and uid != old.uid:
            raise errors.ApiError(
                statuses.conflict(
                    rt.resource,
                    name,
                    rt.group,
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{old.uid}",
                )
            )
        if rv not in (None, "") and str(rv) != str(old.rv):
            raise errors.ApiError(
                statuses.conflict(
                    rt.resource,
                    name,
                    rt.group,
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again",
                )
            )

    def delete_object(
        self,
        rt: resources.ResourceType,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, Any] | None = None,
        propagation: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Stored, bool]:
        """DELETE semantics; returns (object, deleted now)."""
        key = self._key(rt, namespace, name)
        old = self._bucket(rt.storage).items.get(key)
        if old is None:
            raise errors.not_found(rt.resource, name, rt.group)
        pre = preconditions or {}
        self._check_preconditions(rt, old, pre.get("uid"), pre.get("resourceVersion"))
        if propagation not in (None, "Background", "Foreground", "Orphan"):
            raise errors.bad_request(f"unsupported propagationPolicy {propagation!r}")
        if dry_run:
            return old, False
        if old.deleting:
            return old, False
        if rt.storage == NAMESPACES:
            return self._delete_namespace(old, name)
        if propagation == "Foreground":
            self._collect_dependents(old.uid, cascade=True)
        if old.meta.get("finalizers"):
            new = old.copy()
            new["metadata"]["deletionTimestamp"] = self._now()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            stored = self._commit(rt.storage, key, new, MODIFIED, old)
            if propagation == "Orphan":
                self._collect_dependents(old.uid, cascade=False)
            return stored, False
        return self._remove(rt.storage, key, cascade=propagation != "Orphan"), True

    def _remove(self, storage: GroupResource, key: Key, *, cascade: bool) -> Stored:
        """Really delete: the DELETED event, then what controllers do about it."""
        old = self._bucket(storage).items[key]
        stored = self._commit(storage, key, old.copy(), DELETED, old)
        if storage == CRD_STORAGE:
            self._retire_crd(old)
        elif storage == ("", "services"):
            spec = old.obj.get("spec") or {}
            ip = spec.get("clusterIP")
            if ip and ip != "None":
                self.allocator.release_ip(str(ip))
            for port in spec.get("ports") or ():
                if isinstance(port, dict) and isinstance(port.get("nodePort"), int):
                    self.allocator.release_port(port["nodePort"])
        elif storage == ("", "pods"):
            self.logs.close_pod(key[0], key[1])
        self._collect_dependents(old.uid, cascade=cascade)
        if key[0]:
            ns = self._bucket(NAMESPACES).items.get(("", key[0]))
            if ns is not None and ns.deleting:
                self._finish_namespace(ns)
        return stored

    def _collect_dependents(self, owner_uid: str, *, cascade: bool) -> None:
        """The garbage collector: delete (or orphan) objects owned by ``owner_uid``."""
        for storage, key in sorted(self._dependents.get(owner_uid, ())):
            dep = self._bucket(storage).items.get(key)
            if dep is None:
                continue
            others = [
                u for u in updating.owner_uids(dep.obj) if u != owner_uid and u in self._by_uid
            ]
            if cascade and not others:
                if dep.deleting:
                    continue
                if dep.meta.get("finalizers"):
                    new = dep.copy()
                    new["metadata"]["deletionTimestamp"] = self._now()
                    new["metadata"]["deletionGracePeriodSeconds"] = 0
                    self._commit(storage, key, new, MODIFIED, dep)
                else:
                    self._remove(storage, key, cascade=True)
            else:
                new = dep.copy()
                new["metadata"]["ownerReferences"] = [
                    r
                    for r in new["metadata"].get("ownerReferences") or []
                    if r.get("uid") != owner_uid
                ]
                if not new["metadata"]["ownerReferences"]:
                    del new["metadata"]["ownerReferences"]
                self._commit(storage, key, new, MODIFIED, dep)

    # --- namespaces ----------------------------------------------------------------------------

    def _delete_namespace(self, old: Stored, name: str) -> tuple[Stored, bool]:
        new = old.copy()
        new["metadata"]["deletionTimestamp"] = self._now()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("status", {})["phase"] = "Terminating"
        stored = self._commit(NAMESPACES, ("", name), new, MODIFIED, old)
        # The namespace controller: delete everything inside, then the namespace itself.
        for storage, bucket in list(self._buckets.items()):
            if storage == NAMESPACES:
                continue
            for key in keys_in(bucket.sorted_keys(), name, None):
                found = bucket.items.get(key)
                if found is None:
                    continue
                if found.meta.get("finalizers"):
                    if not found.deleting:
                        marked = found.copy()
                        marked["metadata"]["deletionTimestamp"] = self._now()
                        marked["metadata"]["deletionGracePeriodSeconds"] = 0
                        self._commit(storage, key, marked, MODIFIED, found)
                else:
                    self._remove(storage, key, cascade=True)
        current = self._bucket(NAMESPACES).items.get(("", name))
        if current is not None:
            done = self._finish_namespace(current)
            if done is not None:
                return done, True
        return stored, False

    def _run_pod(self, key: Key) -> None:
        """The scheduler and kubelet, instantly: bind a Pending pod and start it."""
        pod = self._bucket(PODS).items[key]
        if (pod.obj.get("status") or {}).get("phase") != "Pending" or pod.deleting:
            return
        nodes = {str(s.meta["name"]): s.obj for s in self._bucket(NODES).items.values()}
        now = self._now()
        node_name = (pod.obj.get("spec") or {}).get("nodeName")
        if not node_name:
            node_name = podlifecycle.pick_node(pod.obj, nodes.values(), self._node_load)
            if node_name is None:
                self._commit(
                    PODS, key, podlifecycle.unschedulable(pod.obj, len(nodes), now), MODIFIED, pod
                )
                return
            pod = self._commit(
                PODS, key, podlifecycle.bound(pod.obj, node_name, now), MODIFIED, pod
            )
        self._node_load[str(node_name)] += 1
        node = nodes.get(str(node_name))
        if node is None or not podlifecycle.node_ready(node):
            return
        self._pod_ips += 1
        ip = podlifecycle.pod_ip(node, self._pod_ips)
        self._commit(PODS, key, podlifecycle.running(pod.obj, node, ip, now), MODIFIED, pod)

    def _populate_namespace(self, name: str) -> None:
        """What controllers put in every new namespace: the default SA and the root CA."""
        sa_type = self.registry.get("", "v1", "serviceaccounts")
        cm_type = self.registry.get("", "v1", "configmaps")
        if sa_type is not None and self.find(sa_type, name, "default") is None:
            self.create_object(
                sa_type,
                {"metadata": {"name": "default", "namespace": name}},
                namespace=name,
            )
        if cm_type is not None and self.find(cm_type, name, "kube-root-ca.crt") is None:
            self.create_object(
                cm_type,
                {
                    "metadata": {
                        "name": "kube-root-ca.crt",
                        "namespace": name,
                        "annotations": {
                            "kubernetes.io/description": "Contains a CA bundle that can be used "
                            "to verify the kube-apiserver when using internal endpoints such as "
                            "the internal service IP or kubernetes.default.svc. No other usage "
                            "is guaranteed across distributions of Kubernetes clusters."
                        },
                    },
                    "data": {"ca.crt": self.authority.cert_pem.decode()},
                },
                namespace=name,
            )

    def _finish_namespace(self, ns: Stored) -> Stored | None:
        name = str(ns.meta["name"])
        for storage, bucket in self._buckets.items():
            if storage != NAMESPACES and keys_in(bucket.sorted_keys(), name, None):
                return None
        if ns.meta.get("finalizers"):
            return None
        return self._remove(NAMESPACES, ("", name), cascade=True)

    # --- CRDs ----------------------------------------------------------------------------------

    def _retire_crd(self, crd: Stored) -> None:
        name = str(crd.meta["name"])
        spec = crd.obj.get("spec") or {}
        storage = (str(spec.get("group", "")), str((spec.get("names") or {}).get("plural", "")))
        bucket = self._buckets.get(storage)
        if bucket is not None:
            for key in list(bucket.sorted_keys()):
                if key in bucket.items:
                    self._remove(storage, key, cascade=True)
            self._buckets.pop(storage, None)
        self.registry.remove_crd(name)
        for watcher in list(self._watchers):
            if watcher.storage == storage:
                watcher.close(f"the server could not find the requested resource ({name} deleted)")

    # --- lists and watches -----------------------------------------------------------------

    def _snapshot(self, storage: GroupResource, rv: int) -> dict[Key, Stored]:
        """The bucket as of ``rv``: current objects with later events undone."""
        if rv < self._compacted:
            raise errors.expired(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter."
            )
        items = self._bucket(storage).items
        later = [e for e in self._history if e.rv > rv and e.storage == storage]
        if not later:
            return items
        snap = dict(items)
        for event in reversed(later):
            if event.type == ADDED:
                snap.pop(event.key, None)
            elif event.prev is not None:
                snap[event.key] = event.prev
        return snap

    def list_objects(
        self,
        rt: resources.ResourceType,
        flt: Filter,
        *,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult:
        storage = rt.storage
        if continue_token:
            if resource_version not in (None, ""):
                raise errors.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
            token = paging.decode(continue_token)
            snap_rv, after = token.rv, token.after
            items = self._snapshot(storage, snap_rv)
        else:
            after = None
            snap_rv = self._rv
            items = self._bucket(storage).items
            if resource_version not in (None, "", "0"):
                try:
                    wanted = int(str(resource_version))
                except ValueError:
                    raise errors.bad_request(
                        f"invalid resourceVersion {resource_version!r}: not a number"
                    ) from None
                if resource_version_match == "Exact":
                    items = self._snapshot(storage, wanted)
                    snap_rv = wanted
                elif wanted > self._rv:
                    raise errors.ApiError(
                        statuses.failure(
                            504,
                            f"Too large resource version: {wanted}, current: {self._rv}",
                            reason="Timeout",
                            details={
                                "causes": [
                                    {
                                        "reason": "ResourceVersionTooLarge",
                                        "message": "Too large resource version",
                                    }
                                ],
                                "retryAfterSeconds": 1,
                            },
                        )
                    )
            elif resource_version == "0":
                # Served "from the watch cache": any version will do and limit is ignored.
                limit = None
        if items is self._bucket(storage).items:
            keys = self._bucket(storage).sorted_keys()
        else:
            keys = sorted(items)
        keys = keys_in(keys, flt.namespace, after)
        out: list[Stored] = []
        last: Key | None = None
        need_scan = not (flt.labels.empty() and flt.fields.empty())
        for i, key in enumerate(keys):
            stored = items[key]
            if need_scan and not (
                flt.labels.matches(stored.labels) and flt.fields.matches(stored.fields)
            ):
                continue
            if limit and len(out) >= limit:
                return ListResult(
                    out,
                    snap_rv,
                    paging.encode(snap_rv, last) if last is not None else None,
                    None if need_scan else len(keys) - i,
                )
            out.append(stored)
            last = key
        return ListResult(out, snap_rv)

    def watch(
        self,
        rt: resources.ResourceType,
        flt: Filter,
        *,
        resource_version: str | None = None,
        send_initial_events: bool | None = None,
    ) -> WatchStart:
        """Register a watcher; raises a 410 ApiError when ``resource_version`` is too old."""
        storage = rt.storage
        watcher = Watcher(storage, flt, self.watch_queue_size)
        initial: list[tuple[str, Stored]] = []
        if resource_version in (None, "", "0") or send_initial_events:
            if send_initial_events is not False:
                bucket = self._bucket(storage)
                for key in keys_in(bucket.sorted_keys(), flt.namespace, None):
                    stored = bucket.items[key]
                    if flt.matches(key, stored):
                        initial.append((ADDED, stored))
        else:
            try:
                start = int(str(resource_version))
            except ValueError:
                raise errors.bad_request(
                    f"invalid resourceVersion {resource_version!r}: not a number"
                ) from None
            if start < self._compacted:
                raise errors.expired(f"too old resource version: {start} ({self._compacted + 1})")
            for event in self._history:
                if event.rv > start:
                    kind = watcher.classify(event)
                    if kind is not None:
                        initial.append((kind, event.obj))
        self._watchers.add(watcher)
        return WatchStart(initial, watcher, self._rv)

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def close_watchers(self, reason: str) -> None:
        for watcher in list(self._watchers):
            watcher.close(reason)

    def history_events(self) -> list[Event]:
        return list(self._history)

    def lookup_service_account(self, namespace: str, name: str) -> str | None:
        found = self._bucket(SERVICEACCOUNTS).items.get((namespace, name))
        return found.uid if found is not None else None

    def set_history_size(self, size: int) -> None:
        """Shrink or grow the event history (tests use a tiny one to provoke 410s)."""
        events = list(self._history)
        self._history = collections.deque(events[-size:], maxlen=max(1, size))
        if len(events) > size:
            self._compacted = events[-size - 1].rv if size else self._rv

    # --- dict API (tests mutate the cluster directly) -------------------------------------

    def resolve(self, resource: str | resources.ResourceType) -> resources.ResourceType:
        if isinstance(resource, resources.ResourceType):
            return resource
        try:
            return self.registry.resolve(resource)
        except KeyError as e:
            raise errors.not_found(resource, "") from e

    def _type_of(self, obj: Mapping[str, Any]) -> resources.ResourceType:
        rt = self.registry.for_kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if rt is None:
            raise errors.bad_request(
                f"no kind {obj.get('kind')!r} is registered for version {obj.get('apiVersion')!r}"
            )
        return rt

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj`` (its apiVersion/kind say where); returns the stored object."""
        rt = self._type_of(obj)
        body = copy.deepcopy(dict(obj))
        return conversion.from_storage(rt, self.create_object(rt, body).copy())

    def get(
        self, resource: str | resources.ResourceType, namespace: str | None, name: str
    ) -> dict[str, Any]:
        rt = self.resolve(resource)
        return conversion.from_storage(rt, self.get_object(rt, namespace, name).copy())

    def update(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace an object, status included; conditional only if it carries a resourceVersion."""
        rt = self._type_of(obj)
        body = copy.deepcopy(dict(obj))
        meta = body.get("metadata") or {}
        stored, _ = self.update_object(
            rt, body, namespace=meta.get("namespace"), name=str(meta.get("name")), full=True
        )
        return conversion.from_storage(rt, stored.copy())

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj``, or replace it (unconditionally) when it exists."""
        rt = self._type_of(obj)
        meta = obj.get("metadata") or {}
        if self.find(rt, meta.get("namespace") or "default", str(meta.get("name"))) is None:
            return self.create(obj)
        body = copy.deepcopy(dict(obj))
        body["metadata"].pop("resourceVersion", None)
        return self.update(body)

    def delete(
        self,
        resource: str | resources.ResourceType,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = None,
    ) -> dict[str, Any] | None:
        """Delete; returns the object if finalizers keep it (deletionTimestamp set), else None."""
        rt = self.resolve(resource)
        stored, deleted = self.delete_object(rt, namespace, name, propagation=propagation)
        return None if deleted else conversion.from_storage(rt, stored.copy())

    def list(
        self,
        resource: str | resources.ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[dict[str, Any]]:
        rt = self.resolve(resource)
        flt = Filter(
            namespace if rt.namespaced else None,
            selectors.parse_labels(label_selector),
            selectors.parse_fields(field_selector),
        )
        return [conversion.from_storage(rt, s.copy()) for s in self.list_objects(rt, flt).items]

    def objects(self, resource: str | resources.ResourceType) -> Iterable[Stored]:
        """Every stored version of ``resource`` (read-only; do not mutate)."""
        return list(self._bucket(self.resolve(resource).storage).items.values())
