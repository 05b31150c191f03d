"""Reading ``manifests/`` for the manifest tests: every YAML object with its file, the
containers of the workloads, and two strict checks kubectl cannot do against the simulated
apiserver (it accepts ``fieldValidation=Strict`` and ignores it):

* ``lost_fields``: a built-in object round-tripped through the official ``kubernetes``
  client models; a misspelled or misplaced field is dropped by the model and shows up here.
* ``unknown_fields``: a custom resource walked against its CRD's ``openAPIV3Schema``, as
  the apiserver's pruning would.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
IMAGE_REPOSITORY = "ghcr.io/edgehub/edgehub"
STATIC_POD = MANIFESTS / "hub" / "edgehub-hub.yaml"
KUBELET_KUBECONFIG = MANIFESTS / "hub" / "kubelet.conf"
SAMPLES = MANIFESTS / "discovery" / "samples"
HANDLERS = MANIFESTS / "discovery" / "handlers"
KUSTOMIZATION = MANIFESTS / "kustomization.yaml"
# Files kustomization.yaml leaves out on purpose (its header says why).
NOT_IN_KUSTOMIZATION = {
    STATIC_POD,
    HANDLERS / "debug-echo.yaml",
    MANIFESTS / "manager" / "webhook.yaml",
}


@dataclasses.dataclass(frozen=True)
class Manifest:
    path: Path
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        value = self.doc["metadata"].get("namespace")
        return None if value is None else str(value)

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.kind, self.name, self.namespace)


# Not objects to apply as they are: the Helm chart (templates; its own tests:
# test_helm_chart.py) and the dashboards (a Grafana JSON, a PrometheusRule for the Prometheus
# Operator's CRD; test_dashboards.py).
NOT_OBJECTS = (MANIFESTS / "helm", MANIFESTS / "dashboards")


def manifest_files() -> list[Path]:
    """Every file kubectl ``-R -f`` would read, without kustomize's own."""
    return sorted(
        p
        for p in MANIFESTS.rglob("*")
        if p.suffix in (".yaml", ".yml", ".json")
        and p.name != "kustomization.yaml"
        and not any(d in p.parents for d in NOT_OBJECTS)
    )


def load(path: Path) -> list[Manifest]:
    return [Manifest(path, d) for d in yaml.safe_load_all(path.read_text()) if d is not None]


def all_manifests() -> list[Manifest]:
    return [m for path in manifest_files() for m in load(path)]


def one(path: Path, kind: str) -> dict[str, Any]:
    (found,) = [m.doc for m in load(path) if m.kind == kind]
    return found


def pod_spec(doc: Mapping[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    return dict(spec["template"]["spec"] if "template" in spec else spec)


def workloads() -> Iterator[Manifest]:
    return (m for m in all_manifests() if m.kind in ("Pod", "DaemonSet", "Deployment"))


def project_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


# --------------------------------------------------------------------------- strict checks


def model_name(doc: Mapping[str, Any]) -> str:
    """The client model class of a built-in object: ``apps/v1`` ``DaemonSet`` -> ``V1DaemonSet``."""
    version = str(doc["apiVersion"]).rpartition("/")[2]
    name = f"{version.capitalize()}{doc['kind']}"
    assert hasattr(k8s, name), f"the kubernetes client has no model {name}"
    return name


def lost_fields(doc: Mapping[str, Any]) -> list[str]:
    """Paths present in ``doc`` but absent after a round trip through its client model."""
    api = k8s.ApiClient()
    model = api.deserialize(json.dumps(doc), model_name(doc), "application/json")
    again = api.sanitize_for_serialization(model)  # type: ignore[no-untyped-call]
    return list(_missing(doc, again, ""))


def _missing(original: Any, again: Any, path: str) -> Iterator[str]:
    if isinstance(original, Mapping):
        if not isinstance(again, Mapping):
            yield path or "."
            return
        for key, value in original.items():
            if key not in again:
                yield f"{path}.{key}"
            else:
                yield from _missing(value, again[key], f"{path}.{key}")
    elif isinstance(original, list):
        if not isinstance(again, list) or len(again) != len(original):
            yield path
            return
        for number, (a, b) in enumerate(zip(original, again, strict=True)):
            yield from _missing(a, b, f"{path}[{number}]")


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def unknown_fields(value: Any, schema: Mapping[str, Any], path: str = "") -> Iterator[str]:
    """Fields the schema does not declare, and values of the wrong type (pruning's view)."""
    if value is None and schema.get("nullable"):
        return
    expected = schema.get("type")
    if expected is not None:
        ok = isinstance(value, _TYPES[str(expected)])
        if expected in ("integer", "number") and isinstance(value, bool):
            ok = False
        if not ok:
            yield f"{path or '.'}: expected {expected}, got {type(value).__name__}"
            return
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                yield from unknown_fields(item, properties[key], f"{path}.{key}")
            elif isinstance(additional, Mapping):
                yield from unknown_fields(item, additional, f"{path}.{key}")
            elif path == "" and key in ("apiVersion", "kind", "metadata"):
                continue
            else:
                yield f"{path}.{key}: not in the schema"
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for number, item in enumerate(value):
            yield from unknown_fields(item, schema["items"], f"{path}[{number}]")


def crd_schema(kind: str) -> dict[str, Any]:
    for path in sorted((MANIFESTS / "crds").glob("*.yaml")):
        for m in load(path):
            if m.doc["spec"]["names"]["kind"] == kind:
                (version,) = [v for v in m.doc["spec"]["versions"] if v["storage"]]
                return dict(version["schema"]["openAPIV3Schema"])
    raise KeyError(kind)
