"""OpenAPI v3 documents, just enough for kubectl's validation, apply and explain.

What kubectl 1.32 reads and why it matters:

- ``/openapi/v3`` (the index) and ``/openapi/v3/<api|apis/g/v>?hash=...``. kubectl's
  ``--validate=strict`` (the default for create/apply/replace) looks for a PATCH
  operation tagged with the kind's ``x-kubernetes-group-version-kind`` that takes a
  ``fieldValidation`` query parameter; finding it, kubectl leaves validation to the
  server. Without these documents every ``kubectl create -f`` fails with "failed
  to download openapi".
- Client-side apply computes its patch from OpenAPI only when the PATCH operation
  declares a request body with the strategic-merge content type. The documents
  here declare no request body on purpose: kubectl then falls back to the patch
  metadata compiled into it (exact strategic-merge keys for built-in kinds) and
  to a JSON merge patch for custom resources, which is what a real cluster's
  CRDs get anyway.
- ``kubectl explain`` reads ``components.schemas``: built-in kinds get a
  skeleton (apiVersion, kind, metadata, spec, status); CRD versions publish their
  ``openAPIV3Schema``.

``/openapi/v2`` answers 404: kubectl only asks for it (as protobuf) after v3 failed.
The sim accepts ``fieldValidation`` and ignores it (unknown fields are kept).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from aiohttp import web

from yurthub import statuses
from yurthub.testing.sim import bodies, context, discoverydocs, resources

_GROUP_PACKAGES = {
    "": "io.k8s.api.core",
    "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
}
_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def _schema_name(rt: resources.ResourceType) -> str:
    if rt.custom:
        reversed_group = ".".join(reversed(rt.group.split(".")))
        return f"{reversed_group}.{rt.version}.{rt.kind}"
    package = _GROUP_PACKAGES.get(rt.group)
    if package is None:
        short = rt.group.split(".")[0]
        package = f"io.k8s.api.{short}"
    return f"{package}.{rt.version}.{rt.kind}"


def _gvk(rt: resources.ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _skeleton(rt: resources.ResourceType) -> dict[str, Any]:
    if rt.custom and rt.schema:
        schema = dict(rt.schema)
    else:
        schema = {
            "description": f"{rt.kind} (served by the simulated apiserver).",
            "type": "object",
            "properties": {
                "apiVersion": {
                    "description": "APIVersion defines the versioned schema of this "
                    "representation of an object.",
                    "type": "string",
                },
                "kind": {
                    "description": "Kind is a string value representing the REST resource "
                    "this object represents.",
                    "type": "string",
                },
                "metadata": {
                    "description": "Standard object's metadata.",
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "spec": {
                    "description": f"Specification of the desired behavior of the {rt.kind}.",
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "status": {
                    "description": f"Most recently observed status of the {rt.kind}.",
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                },
            },
        }
    schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return schema


def _operation(rt: resources.ResourceType, action: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{_schema_name(rt)}"}
    return {
        "description": f"{action} the specified {rt.kind}",
        "operationId": f"{action}{rt.kind}",
        "parameters": [
            {"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for p in _QUERY_PARAMS
        ],
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
    }


def _prefix(group: str, version: str) -> str:
    return f"/api/{version}" if not group else f"/apis/{group}/{version}"


def group_version_document(
    registry: resources.Registry, group: str, version: str
) -> dict[str, Any] | None:
    types = [rt for rt in registry.in_group_version(group, version) if not rt.virtual]
    virtual = [rt for rt in registry.in_group_version(group, version) if rt.virtual]
    if not types and not virtual:
        return None
    doc_paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rt in types:
        base = _prefix(group, version)
        if rt.namespaced:
            base += "/namespaces/{namespace}"
        item = f"{base}/{rt.resource}/{{name}}"
        doc_paths[f"{base}/{rt.resource}"] = {
            "get": _operation(rt, "list"),
            "post": _operation(rt, "post"),
        }
        doc_paths[item] = {
            "get": _operation(rt, "get"),
            "put": _operation(rt, "put"),
            "patch": _operation(rt, "patch"),
            "delete": _operation(rt, "delete"),
        }
        schemas[_schema_name(rt)] = _skeleton(rt)
    for rt in virtual:
        doc_paths[f"{_prefix(group, version)}/{rt.resource}"] = {"post": _operation(rt, "post")}
        schemas[_schema_name(rt)] = _skeleton(rt)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": discoverydocs.KUBE_VERSION},
        "paths": doc_paths,
        "components": {"schemas": schemas},
    }


def _path_key(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _encoded(registry: resources.Registry, group: str, version: str) -> bytes | None:
    doc = group_version_document(registry, group, version)
    return None if doc is None else orjson.dumps(doc)


def index(registry: resources.Registry) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    for group, versions in registry.groups():
        for version in versions:
            raw = _encoded(registry, group, version)
            if raw is None:
                continue
            digest = hashlib.sha512(raw).hexdigest()[:64].upper()
            key = _path_key(group, version)
            entries[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": entries}


def _not_found() -> web.Response:
    return bodies.status_response(
        statuses.failure(404, "the server could not find the requested resource")
    )


async def v2(request: web.Request) -> web.StreamResponse:
    return _not_found()


async def v3_index(request: web.Request) -> web.StreamResponse:
    return bodies.respond(index(request.app[context.CONTEXT].state.registry))


async def v3_document(request: web.Request) -> web.StreamResponse:
    registry = request.app[context.CONTEXT].state.registry
    parts = request.match_info["path"].strip("/").split("/")
    if parts[:1] == ["api"] and len(parts) == 2:
        raw = _encoded(registry, "", parts[1])
    elif parts[:1] == ["apis"] and len(parts) == 3:
        raw = _encoded(registry, parts[1], parts[2])
    else:
        raw = None
    if raw is None:
        return _not_found()
    headers = {"Content-Type": "application/json"}
    if "hash" in request.query:
        headers["Cache-Control"] = "public, immutable"
    return web.Response(body=raw, headers=headers)
