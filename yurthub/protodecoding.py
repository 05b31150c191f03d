"""Decoding Kubernetes protobuf request bodies into JSON-shaped dicts. PURE: bytes in, dicts out.

Who needs it: the hub answers kubelet's lease renewals itself, and kubelet PUTs its Lease as
protobuf (as every Go client with its default content type does); the simulated apiserver
stores what clients send, and kubectl's typed clients (``kubectl create configmap|secret|
namespace|deployment|job|cronjob|service|role|rolebinding|token|priorityclass|pdb|quota ...``) POST
``application/vnd.kubernetes.protobuf`` bodies; a server that cannot read them
breaks those commands. Answers stay JSON: those clients also accept JSON.

Format: ``k8s\\x00`` + ``runtime.Unknown{typeMeta{apiVersion,kind}, raw}``; ``raw``
is the object's message. The schema table below names, per message, the
field numbers kubectl's generators and common controllers send (ObjectMeta,
ConfigMap, Secret, Namespace, ServiceAccount, Service, Deployment, Job, CronJob,
the RBAC kinds, PriorityClass, PodDisruptionBudget, ResourceQuota,
TokenRequest, CSR, Lease, Event, Eviction, a pod template subset). It is written
from the field numbers of the upstream ``generated.proto`` files (which never
renumber) and checked against bodies captured from kubectl 1.32.

Proto semantics that differ from JSON, and what we do:

- gogo encodes every non-pointer scalar, so ``""``, ``0`` and ``false`` are
  dropped (JSON ``omitempty``), except fields marked ``!`` (pointers upstream,
  where presence means "set", e.g. ``replicas: 0``);
- an empty ``Time`` means "unset" and is dropped; other empty messages stay ``{}``;
- ``bytes`` become base64 strings, ``IntOrString`` an int or a string, maps dicts.

A field number missing from the table of a message raises ``ProtobufError`` naming the
message and field (status messages are lenient: unknown fields are skipped, the server
ignores status on create anyway); callers answer it with a 415.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# Field spec: "<json name>:<type>" with optional "[]" (repeated) and "!" (keep zero values).
# Types: s string, i integer, b bool, y bytes, t Time, mt MicroTime, ios IntOrString,
# q Quantity, ms map<string,string>, my map<string,bytes>, mq map<string,Quantity>,
# raw RawExtension, or a message name.
Schema = dict[str, dict[int, str]]

SCHEMAS: Schema = {
    # --- apimachinery ---------------------------------------------------------------------
    "ObjectMeta": {
        1: "name:s",
        2: "generateName:s",
        3: "namespace:s",
        4: "selfLink:s",
        5: "uid:s",
        6: "resourceVersion:s",
        7: "generation:i",
        8: "creationTimestamp:t",
        9: "deletionTimestamp:t",
        10: "deletionGracePeriodSeconds:i!",
        11: "labels:ms",
        12: "annotations:ms",
        13: "ownerReferences:OwnerReference[]",
        14: "finalizers:s[]",
        17: "managedFields:-",
    },
    "OwnerReference": {
        1: "kind:s",
        3: "name:s",
        4: "uid:s",
        5: "apiVersion:s",
        6: "controller:b!",
        7: "blockOwnerDeletion:b!",
    },
    "LabelSelector": {1: "matchLabels:ms", 2: "matchExpressions:LabelSelectorRequirement[]"},
    "LabelSelectorRequirement": {1: "key:s", 2: "operator:s", 3: "values:s[]"},
    "Condition": {
        1: "type:s",
        2: "status:s",
        3: "observedGeneration:i",
        4: "lastTransitionTime:t",
        5: "reason:s",
        6: "message:s",
    },
    "DeleteOptions": {
        1: "gracePeriodSeconds:i!",
        2: "preconditions:Preconditions",
        3: "orphanDependents:b!",
        4: "propagationPolicy:s",
        5: "dryRun:s[]",
    },
    "Preconditions": {1: "uid:s", 2: "resourceVersion:s"},
    # --- core/v1 -------------------------------------------------------------------------
    "Namespace": {1: "metadata:ObjectMeta", 2: "spec:NamespaceSpec", 3: "status:~"},
    "NamespaceSpec": {1: "finalizers:s[]"},
    "ConfigMap": {
        1: "metadata:ObjectMeta",
        2: "data:ms",
        3: "binaryData:my",
        4: "immutable:b!",
    },
    "Secret": {
        1: "metadata:ObjectMeta",
        2: "data:my",
        3: "type:s",
        4: "stringData:ms",
        5: "immutable:b!",
    },
    "ServiceAccount": {
        1: "metadata:ObjectMeta",
        2: "secrets:ObjectReference[]",
        3: "imagePullSecrets:LocalObjectReference[]",
        4: "automountServiceAccountToken:b!",
    },
    "ObjectReference": {
        1: "kind:s",
        2: "namespace:s",
        3: "name:s",
        4: "uid:s",
        5: "apiVersion:s",
        6: "resourceVersion:s",
        7: "fieldPath:s",
    },
    "LocalObjectReference": {1: "name:s"},
    "Service": {1: "metadata:ObjectMeta", 2: "spec:ServiceSpec", 3: "status:~"},
    "ServiceSpec": {
        1: "ports:ServicePort[]",
        2: "selector:ms",
        3: "clusterIP:s",
        4: "type:s",
        5: "externalIPs:s[]",
        7: "sessionAffinity:s",
        8: "loadBalancerIP:s",
        9: "loadBalancerSourceRanges:s[]",
        10: "externalName:s",
        11: "externalTrafficPolicy:s",
        12: "healthCheckNodePort:i",
        13: "publishNotReadyAddresses:b",
        17: "ipFamilyPolicy:s",
        18: "clusterIPs:s[]",
        19: "ipFamilies:s[]",
        20: "allocateLoadBalancerNodePorts:b!",
        21: "loadBalancerClass:s",
        22: "internalTrafficPolicy:s",
    },
    "ServicePort": {
        1: "name:s",
        2: "protocol:s",
        3: "port:i",
        4: "targetPort:ios",
        5: "nodePort:i",
        6: "appProtocol:s",
    },
    "ResourceQuota": {1: "metadata:ObjectMeta", 2: "spec:ResourceQuotaSpec", 3: "status:~"},
    "ResourceQuotaSpec": {1: "hard:mq", 2: "scopes:s[]"},
    "PodTemplateSpec": {1: "metadata:ObjectMeta", 2: "spec:PodSpec"},
    "Pod": {1: "metadata:ObjectMeta", 2: "spec:PodSpec", 3: "status:~"},
    "PodSpec": {
        2: "containers:Container[]",
        3: "restartPolicy:s",
        4: "terminationGracePeriodSeconds:i!",
        5: "activeDeadlineSeconds:i!",
        6: "dnsPolicy:s",
        7: "nodeSelector:ms",
        8: "serviceAccountName:s",
        9: "serviceAccount:s",
        10: "nodeName:s",
        11: "hostNetwork:b",
        12: "hostPID:b",
        13: "hostIPC:b",
        15: "imagePullSecrets:LocalObjectReference[]",
        16: "hostname:s",
        17: "subdomain:s",
        19: "schedulerName:s",
        20: "initContainers:Container[]",
        21: "automountServiceAccountToken:b!",
        24: "priorityClassName:s",
        25: "priority:i!",
        30: "enableServiceLinks:b!",
        31: "preemptionPolicy:s",
    },
    "Container": {
        1: "name:s",
        2: "image:s",
        3: "command:s[]",
        4: "args:s[]",
        5: "workingDir:s",
        6: "ports:ContainerPort[]",
        7: "env:EnvVar[]",
        8: "resources:ResourceRequirements",
        9: "volumeMounts:VolumeMount[]",
        13: "terminationMessagePath:s",
        14: "imagePullPolicy:s",
        16: "stdin:b",
        17: "stdinOnce:b",
        18: "tty:b",
        20: "terminationMessagePolicy:s",
    },
    "ContainerPort": {
        1: "name:s",
        2: "hostPort:i",
        3: "containerPort:i",
        4: "protocol:s",
        5: "hostIP:s",
    },
    "EnvVar": {1: "name:s", 2: "value:s", 3: "valueFrom:EnvVarSource"},
    "EnvVarSource": {
        1: "fieldRef:ObjectFieldSelector",
        3: "configMapKeyRef:KeySelector",
        4: "secretKeyRef:KeySelector",
    },
    "ObjectFieldSelector": {1: "apiVersion:s", 2: "fieldPath:s"},
    # ConfigMapKeySelector / SecretKeySelector: LocalObjectReference (inlined) + key + optional.
    "KeySelector": {1: "localObjectReference:LocalObjectReference", 2: "key:s", 3: "optional:b!"},
    "ResourceRequirements": {1: "limits:mq", 2: "requests:mq"},
    "VolumeMount": {
        1: "name:s",
        2: "readOnly:b",
        3: "mountPath:s",
        4: "subPath:s",
        5: "mountPropagation:s",
        6: "subPathExpr:s",
    },
    "Event": {
        1: "metadata:ObjectMeta",
        2: "involvedObject:ObjectReference",
        3: "reason:s",
        4: "message:s",
        5: "source:EventSource",
        6: "firstTimestamp:t",
        7: "lastTimestamp:t",
        8: "count:i",
        9: "type:s",
        10: "eventTime:mt",
        11: "series:EventSeries",
        12: "action:s",
        13: "related:ObjectReference",
        14: "reportingComponent:s",
        15: "reportingInstance:s",
    },
    "EventSource": {1: "component:s", 2: "host:s"},
    "EventSeries": {1: "count:i", 2: "lastObservedTime:mt"},
    # --- apps/v1, batch/v1 ---------------------------------------------------------------
    "Deployment": {1: "metadata:ObjectMeta", 2: "spec:DeploymentSpec", 3: "status:~"},
    "DeploymentSpec": {
        1: "replicas:i!",
        2: "selector:LabelSelector",
        3: "template:PodTemplateSpec",
        4: "strategy:DeploymentStrategy",
        5: "minReadySeconds:i",
        6: "revisionHistoryLimit:i!",
        7: "paused:b",
        9: "progressDeadlineSeconds:i!",
    },
    "DeploymentStrategy": {1: "type:s", 2: "rollingUpdate:RollingUpdateDeployment"},
    "RollingUpdateDeployment": {1: "maxUnavailable:ios", 2: "maxSurge:ios"},
    "Job": {1: "metadata:ObjectMeta", 2: "spec:JobSpec", 3: "status:~"},
    "JobSpec": {
        1: "parallelism:i!",
        2: "completions:i!",
        3: "activeDeadlineSeconds:i!",
        4: "selector:LabelSelector",
        5: "manualSelector:b!",
        6: "template:PodTemplateSpec",
        7: "backoffLimit:i!",
        8: "ttlSecondsAfterFinished:i!",
        9: "completionMode:s",
        10: "suspend:b!",
    },
    "JobTemplateSpec": {1: "metadata:ObjectMeta", 2: "spec:JobSpec"},
    "CronJob": {1: "metadata:ObjectMeta", 2: "spec:CronJobSpec", 3: "status:~"},
    "CronJobSpec": {
        1: "schedule:s",
        2: "startingDeadlineSeconds:i!",
        3: "concurrencyPolicy:s",
        4: "suspend:b!",
        5: "jobTemplate:JobTemplateSpec",
        6: "successfulJobsHistoryLimit:i!",
        7: "failedJobsHistoryLimit:i!",
        8: "timeZone:s",
    },
    # --- rbac, scheduling, policy ----------------------------------------------------------
    "Role": {1: "metadata:ObjectMeta", 2: "rules:PolicyRule[]"},
    "ClusterRole": {
        1: "metadata:ObjectMeta",
        2: "rules:PolicyRule[]",
        3: "aggregationRule:AggregationRule",
    },
    "AggregationRule": {1: "clusterRoleSelectors:LabelSelector[]"},
    "PolicyRule": {
        1: "verbs:s[]",
        2: "apiGroups:s[]",
        3: "resources:s[]",
        4: "resourceNames:s[]",
        5: "nonResourceURLs:s[]",
    },
    "RoleBinding": {1: "metadata:ObjectMeta", 2: "subjects:Subject[]", 3: "roleRef:RoleRef"},
    "ClusterRoleBinding": {
        1: "metadata:ObjectMeta",
        2: "subjects:Subject[]",
        3: "roleRef:RoleRef",
    },
    "Subject": {1: "kind:s", 2: "apiGroup:s", 3: "name:s", 4: "namespace:s"},
    "RoleRef": {1: "apiGroup:s", 2: "kind:s", 3: "name:s"},
    "PriorityClass": {
        1: "metadata:ObjectMeta",
        2: "value:i",
        3: "globalDefault:b",
        4: "description:s",
        5: "preemptionPolicy:s",
    },
    "PodDisruptionBudget": {
        1: "metadata:ObjectMeta",
        2: "spec:PodDisruptionBudgetSpec",
        3: "status:~",
    },
    "PodDisruptionBudgetSpec": {
        1: "minAvailable:ios",
        2: "selector:LabelSelector",
        3: "maxUnavailable:ios",
        4: "unhealthyPodEvictionPolicy:s",
    },
    "Eviction": {1: "metadata:ObjectMeta", 2: "deleteOptions:DeleteOptions"},
    # --- authentication, certificates, coordination -----------------------------------------
    "TokenRequest": {1: "metadata:ObjectMeta", 2: "spec:TokenRequestSpec", 3: "status:~"},
    "TokenRequestSpec": {
        1: "audiences:s[]",
        3: "boundObjectRef:BoundObjectReference",
        4: "expirationSeconds:i!",
    },
    "BoundObjectReference": {1: "kind:s", 2: "apiVersion:s", 3: "name:s", 4: "uid:s"},
    "CertificateSigningRequest": {
        1: "metadata:ObjectMeta",
        2: "spec:CertificateSigningRequestSpec",
        3: "status:CertificateSigningRequestStatus",
    },
    "CertificateSigningRequestSpec": {
        1: "request:y",
        2: "username:s",
        3: "uid:s",
        4: "groups:s[]",
        5: "usages:s[]",
        6: "extra:-",
        7: "signerName:s",
        8: "expirationSeconds:i!",
    },
    "CertificateSigningRequestStatus": {
        1: "conditions:CertificateSigningRequestCondition[]",
        2: "certificate:y",
    },
    "CertificateSigningRequestCondition": {
        1: "type:s",
        2: "reason:s",
        3: "message:s",
        4: "lastUpdateTime:t",
        5: "lastTransitionTime:t",
        6: "status:s",
    },
    "SelfSubjectReview": {1: "metadata:ObjectMeta", 2: "status:~"},
    "TokenReview": {1: "metadata:ObjectMeta", 2: "spec:TokenReviewSpec", 3: "status:~"},
    "TokenReviewSpec": {1: "token:s", 2: "audiences:s[]"},
    "SelfSubjectAccessReview": {
        1: "metadata:ObjectMeta",
        2: "spec:SelfSubjectAccessReviewSpec",
        3: "status:~",
    },
    "SubjectAccessReview": {1: "metadata:ObjectMeta", 2: "spec:~", 3: "status:~"},
    "SelfSubjectAccessReviewSpec": {
        1: "resourceAttributes:ResourceAttributes",
        2: "nonResourceAttributes:NonResourceAttributes",
    },
    "ResourceAttributes": {
        1: "namespace:s",
        2: "verb:s",
        3: "group:s",
        4: "version:s",
        5: "resource:s",
        6: "subresource:s",
        7: "name:s",
    },
    "NonResourceAttributes": {1: "path:s", 2: "verb:s"},
    "SelfSubjectRulesReview": {1: "metadata:ObjectMeta", 2: "spec:~", 3: "status:~"},
    "Lease": {1: "metadata:ObjectMeta", 2: "spec:LeaseSpec"},
    "LeaseSpec": {
        1: "holderIdentity:s",
        2: "leaseDurationSeconds:i!",
        3: "acquireTime:mt",
        4: "renewTime:mt",
        5: "leaseTransitions:i!",
        6: "strategy:s",
        7: "preferredHolder:s",
    },
}

# Kinds whose ``status`` a create/update may carry but the sim never needs from protobuf.
_ROOT_KINDS = frozenset(k for k, v in SCHEMAS.items() if 1 in v and v[1] == "metadata:ObjectMeta")


class ProtobufError(ValueError):
    """A body that cannot be decoded; the message names the message type and field."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ProtobufError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) in order."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated length-delimited field")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a length-delimited string")
    return value.decode()


def _time(value: int | bytes, micro: bool) -> str | None:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a Time message")
    seconds = nanos = 0
    for number, _wire, v in _fields(value):
        if number == 1 and isinstance(v, int):
            seconds = _signed(v)
        elif number == 2 and isinstance(v, int):
            nanos = _signed(v)
    if seconds == 0 and nanos == 0:
        return None
    when = datetime.datetime.fromtimestamp(seconds + nanos / 1e9, datetime.UTC)
    if micro:
        return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _int_or_string(value: int | bytes) -> int | str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected an IntOrString message")
    kind, number, text = 0, 0, ""
    for n, _wire, v in _fields(value):
        if n == 1 and isinstance(v, int):
            kind = v
        elif n == 2 and isinstance(v, int):
            number = _signed(v)
        elif n == 3:
            text = _text(v)
    return text if kind == 1 else number


def _quantity(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a Quantity message")
    for n, _wire, v in _fields(value):
        if n == 1:
            return _text(v)
    return "0"


def _map_entry(value: int | bytes) -> tuple[str, int | bytes]:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a map entry")
    key: str = ""
    found: int | bytes = b""
    for n, _wire, v in _fields(value):
        if n == 1:
            key = _text(v)
        elif n == 2:
            found = v
    return key, found


def _scalar(kind: str, value: int | bytes) -> Any:
    if kind == "s":
        return _text(value)
    if kind == "i":
        if not isinstance(value, int):
            raise ProtobufError("expected an integer")
        return _signed(value)
    if kind == "b":
        return bool(value)
    if kind == "y":
        if not isinstance(value, bytes):
            raise ProtobufError("expected bytes")
        return base64.b64encode(value).decode()
    if kind in ("t", "mt"):
        return _time(value, kind == "mt")
    if kind == "ios":
        return _int_or_string(value)
    if kind == "q":
        return _quantity(value)
    raise ProtobufError(f"unknown field type {kind!r}")


_MAPS = {"ms": "s", "my": "y", "mq": "q"}


def _is_zero(value: Any) -> bool:
    return value == "" or value is False or (type(value) is int and value == 0)


# Messages whose unknown fields are skipped: newer optional selectors nobody here reads.
LENIENT = frozenset({"ResourceAttributes"})


def decode_message(name: str, data: bytes, *, path: str = "") -> dict[str, Any]:
    schema = SCHEMAS.get(name)
    if schema is None:
        raise ProtobufError(f"no schema for message {name}")
    out: dict[str, Any] = {}
    for number, _wire, value in _fields(data):
        spec = schema.get(number)
        where = path or name
        if spec is None:
            if name in LENIENT:
                continue
            raise ProtobufError(f"field {number} of {where} is not understood")
        field, _, kind = spec.partition(":")
        keep_zero = kind.endswith("!")
        kind = kind.rstrip("!")
        repeated = kind.endswith("[]")
        kind = kind.removesuffix("[]")
        if kind in ("-", "~"):
            # Ignored: managedFields, status on create, CSR extra (server-owned or unused).
            continue
        if kind in _MAPS:
            key, raw_value = _map_entry(value)
            out.setdefault(field, {})[key] = _scalar(_MAPS[kind], raw_value)
            continue
        if kind in SCHEMAS:
            if not isinstance(value, bytes):
                raise ProtobufError(f"field {number} of {where} should be a message")
            decoded: Any = decode_message(kind, value, path=f"{where}.{field}")
            if kind == "KeySelector":
                ref = decoded.pop("localObjectReference", {})
                decoded = {**ref, **decoded}
        elif kind == "raw":
            decoded = value
        else:
            decoded = _scalar(kind, value)
        if repeated:
            out.setdefault(field, []).append(decoded)
        elif decoded is None or (not keep_zero and _is_zero(decoded)):
            continue
        else:
            out[field] = decoded
    return out


def decode(data: bytes) -> dict[str, Any]:
    """A protobuf-encoded object (with the ``k8s\\0`` envelope) as a JSON-shaped dict."""
    if not data.startswith(MAGIC):
        raise ProtobufError("the body does not start with the k8s protobuf magic")
    try:
        api_version = kind = ""
        raw = b""
        for number, _wire, value in _fields(data[len(MAGIC) :]):
            if number == 1 and isinstance(value, bytes):
                for n, _w, v in _fields(value):
                    if n == 1:
                        api_version = _text(v)
                    elif n == 2:
                        kind = _text(v)
            elif number == 2 and isinstance(value, bytes):
                raw = value
        if kind not in _ROOT_KINDS and kind not in ("DeleteOptions", "Eviction"):
            raise ProtobufError(
                f"kind {api_version} {kind or '<none>'} is not among the kinds read as "
                f"protobuf ({', '.join(sorted(_ROOT_KINDS))})"
            )
        body = decode_message(kind, raw)
    except UnicodeDecodeError as e:
        raise ProtobufError(f"a string is not UTF-8: {e}") from e
    return {"kind": kind, "apiVersion": api_version, **body}
