"""The verbs on a resource: get, list, create, update, patch, delete, deletecollection.

Each handler parses the query, calls ``storage.State`` and encodes the answer in
the representation the client negotiated (object, Table, PartialObjectMetadata).
Lists are assembled from each object's stored JSON bytes, so a 10,000-pod list
is mostly one ``bytes.join``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web
from multidict import MultiMapping

from inputbounds import nesting
from yurthub import statuses
from yurthub.cache import selectors
from yurthub.testing.sim import (
    bodies,
    context,
    conversion,
    errors,
    fieldmanaging,
    negotiation,
    patching,
    paths,
    resources,
    storage,
    tables,
)

CSR_STORAGE = ("certificates.k8s.io", "certificatesigningrequests")
INT64_MAX = (1 << 63) - 1


def flag(query: Mapping[str, str], name: str) -> bool | None:
    """A bool query parameter as the apiserver converts it: None when absent; false for "0"
    and "false" (any case); true for anything else, an empty value included (``?watch``)."""
    value = query.get(name)
    if value is None:
        return None
    return value != "0" and value.lower() != "false"


def int_param(query: Mapping[str, str], name: str) -> int | None:
    value = query.get(name)
    if value in (None, ""):
        return None
    try:
        number = int(str(value))
    except ValueError:
        raise errors.bad_request(f"invalid value for {name}: {value!r} is not an integer") from None
    if number < 0:
        raise errors.bad_request(f"invalid value for {name}: must not be negative")
    if number > INT64_MAX:
        raise errors.bad_request(f"invalid value for {name}: out of range for an int64")
    return number


def dry_run(query: MultiMapping[str], options: Mapping[str, Any] | None = None) -> bool:
    """``dryRun=All`` (query, repeatable, or DeleteOptions); anything else is a 400."""
    values = list(query.getall("dryRun", []))
    if options is not None:
        values += [str(v) for v in options.get("dryRun") or ()]
    for v in values:
        if v != "All":
            raise errors.bad_request(f'dryRun: Unsupported value: "{v}": supported values: "All"')
    return bool(values)


# Kinds with a status subresource whose create keeps the status sent (kubelets post it).
KEEPS_STATUS_ON_CREATE = frozenset({("", "nodes"), ("", "namespaces")})


def drop_status_on_create(rt: resources.ResourceType, obj: Any) -> None:
    """A create through the API ignores ``status`` where a status subresource owns it."""
    if rt.has_status and rt.storage not in KEEPS_STATUS_ON_CREATE and isinstance(obj, dict):
        obj.pop("status", None)


def field_validation(query: Mapping[str, str]) -> str | None:
    """``fieldValidation``: Ignore, Warn (the default) or Strict (what kubectl sends)."""
    value = query.get("fieldValidation")
    if value in (None, ""):
        return None
    if value not in ("Ignore", "Warn", "Strict"):
        raise errors.bad_request(
            f'fieldValidation: Unsupported value: "{value}": supported values: "Ignore", '
            '"Strict", "Warn"'
        )
    return value


def list_filter(
    rt: resources.ResourceType, rp: paths.ResourcePath, query: Mapping[str, str]
) -> storage.Filter:
    try:
        labels = selectors.parse_labels(query.get("labelSelector"))
        fields = selectors.parse_fields(query.get("fieldSelector"))
    except selectors.SelectorError as e:
        raise errors.bad_request(str(e)) from e
    resource = rt.storage[1] if not rt.custom else "customresources"
    bad = list(selectors.unsupported(resource, fields))
    if bad:
        raise errors.bad_request(
            f"field label not supported: {bad[0]}"
            if len(bad) == 1
            else f"field labels not supported: {', '.join(bad)}"
        )
    namespace = rp.namespace if rt.namespaced else None
    return storage.Filter(namespace, labels, fields)


def _list_meta(result: storage.ListResult) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(result.rv)}
    if result.continue_token:
        meta["continue"] = result.continue_token
        if result.remaining is not None:
            meta["remainingItemCount"] = result.remaining
    return meta


def encode_list(
    rt: resources.ResourceType,
    result: storage.ListResult,
    neg: negotiation.Negotiated,
    *,
    now: float,
    include: str,
) -> bytes:
    meta = _list_meta(result)
    if neg.form is negotiation.Form.TABLE:
        objs = [conversion.from_storage(rt, s.obj) for s in result.items]
        return orjson.dumps(
            tables.table(rt, objs, now=now, include=include, version=neg.version, list_meta=meta)
        )
    if neg.form is negotiation.Form.PARTIAL:
        if not neg.as_list:
            raise _not_convertible("PartialObjectMetadata, but the requested object is a list", rt)
        return orjson.dumps(
            {
                "kind": "PartialObjectMetadataList",
                "apiVersion": f"meta.k8s.io/{neg.version}",
                "metadata": meta,
                "items": [tables.partial(s.obj, neg.version) for s in result.items],
            }
        )
    head = orjson.dumps({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta})
    items = b",".join([conversion.encode(rt, s.obj, s.raw) for s in result.items])
    return head[:-1] + b',"items":[' + items + b"]}"


def encode_one(
    rt: resources.ResourceType,
    stored: storage.Stored,
    neg: negotiation.Negotiated,
    *,
    now: float,
    include: str = "Metadata",
) -> bytes:
    if neg.form is negotiation.Form.TABLE:
        obj = conversion.from_storage(rt, stored.obj)
        return orjson.dumps(
            tables.table(
                rt,
                [obj],
                now=now,
                include=include,
                version=neg.version,
                list_meta={"resourceVersion": str(stored.rv)},
            )
        )
    if neg.form is negotiation.Form.PARTIAL:
        if neg.as_list:
            raise _not_convertible(
                "PartialObjectMetadataList, but the requested object is not a list", rt
            )
        return orjson.dumps(tables.partial(stored.obj, neg.version))
    return conversion.encode(rt, stored.obj, stored.raw)


def _not_convertible(what: str, rt: resources.ResourceType) -> errors.ApiError:
    """406 as the apiserver answers a metadata form that does not fit the answer (it picks
    the form first, so a JSON fallback in the Accept does not help); for a custom resource's
    get it answers 500 "content is not a list", which the simulator does not copy."""
    listing = what.endswith("is a list")
    if rt.custom:
        go_type = "*unstructured.UnstructuredList" if listing else "*unstructured.Unstructured"
    else:
        package = rt.group.split(".", 1)[0] if rt.group else "core"
        go_type = f"*{package}.{rt.list_kind if listing else rt.kind}"
    return errors.ApiError(
        statuses.failure(406, f"you requested {what} ({go_type})", reason="NotAcceptable")
    )


def include_object(query: Mapping[str, str]) -> str:
    value = query.get("includeObject") or "Metadata"
    if value not in ("None", "Metadata", "Object"):
        raise errors.bad_request(f'includeObject: Unsupported value: "{value}"')
    return value


def negotiate(request: web.Request) -> negotiation.Negotiated:
    """Every verb that answers with an object offers it as a Table or PartialObjectMetadata
    too, as the apiserver does (kube-rs ``patch_metadata`` asks for the latter)."""
    return negotiation.negotiate(request.headers.get("Accept"), table=True, partial=True)


def writer(
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
    operation: str = fieldmanaging.UPDATE,
) -> fieldmanaging.Writer:
    """Who this write is in managedFields: ``?fieldManager=``, else the User-Agent's
    program name; ``force`` only for apply (a 422 elsewhere, as from the apiserver)."""
    query = request.query
    manager = query.get("fieldManager") or fieldmanaging.manager_from_user_agent(
        request.headers.get("User-Agent")
    )
    options = {"POST": "CreateOptions", "PUT": "UpdateOptions"}.get(request.method, "PatchOptions")
    fieldmanaging.validate_manager(manager, options)
    force = flag(query, "force") if request.method == "PATCH" else None
    if force is not None and operation != fieldmanaging.APPLY:
        raise fieldmanaging.force_not_allowed()
    return fieldmanaging.Writer(
        manager, operation, rt.api_version, rp.subresource or "", force=bool(force)
    )


async def get(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    neg = negotiate(request)
    assert rp.name is not None
    stored = ctx.state.get_object(rt, rp.namespace, rp.name)
    body = encode_one(rt, stored, neg, now=ctx.state.clock(), include=include_object(request.query))
    return bodies.respond(body, as_yaml=neg.yaml)


async def list_(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    neg = negotiate(request)
    query = request.query
    result = ctx.state.list_objects(
        rt,
        list_filter(rt, rp, query),
        resource_version=query.get("resourceVersion"),
        resource_version_match=query.get("resourceVersionMatch"),
        limit=int_param(query, "limit"),
        continue_token=query.get("continue"),
    )
    body = encode_list(rt, result, neg, now=ctx.state.clock(), include=include_object(query))
    return bodies.compress_large(request, bodies.respond(body, as_yaml=neg.yaml))


def written(
    ctx: context.ServerContext,
    rt: resources.ResourceType,
    stored: storage.Stored,
    neg: negotiation.Negotiated,
    warnings: list[str],
    *,
    status: int = 200,
) -> web.StreamResponse:
    """The answer to a write: the stored object in the form the client negotiated, with the
    warnings the write raised."""
    return bodies.respond(
        encode_one(rt, stored, neg, now=ctx.state.clock()),
        status=status,
        as_yaml=neg.yaml,
        warnings=warnings,
    )


async def read_object(ctx: context.ServerContext, request: web.Request) -> Any:
    fmt = negotiation.body_format(request.headers.get("Content-Type"), patch=False)
    raw = await bodies.read(request, ctx.max_body_bytes)
    return bodies.decode(raw, fmt, ctx.converter)


async def create(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    neg = negotiate(request)
    who = writer(request, rt, rp)
    obj = await read_object(ctx, request)
    if rt.storage == CSR_STORAGE and isinstance(obj, dict) and context.USER in request:
        # The apiserver records who asked, whatever the body claims.
        user = request[context.USER]
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.update(username=user.name, groups=list(user.groups))
            if user.uid:
                spec["uid"] = user.uid
    drop_status_on_create(rt, obj)
    warnings: list[str] = []
    stored = ctx.state.create_object(
        rt,
        obj,
        namespace=rp.namespace,
        dry_run=dry_run(request.query),
        field_validation=field_validation(request.query),
        warnings=warnings,
        writer=who,
    )
    return written(ctx, rt, stored, neg, warnings, status=201)


async def update(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    neg = negotiate(request)
    who = writer(request, rt, rp)
    obj = await read_object(ctx, request)
    assert rp.name is not None
    warnings: list[str] = []
    stored, created = ctx.state.update_object(
        rt,
        obj,
        namespace=rp.namespace,
        name=rp.name,
        subresource=rp.subresource,
        dry_run=dry_run(request.query),
        field_validation=field_validation(request.query),
        warnings=warnings,
        writer=who,
    )
    return written(ctx, rt, stored, neg, warnings, status=201 if created else 200)


def apply_patch_document(
    rt: resources.ResourceType,
    fmt: negotiation.BodyFormat,
    current: dict[str, Any] | None,
    patch: Any,
) -> Any:
    if fmt is negotiation.BodyFormat.MERGE_PATCH:
        if not isinstance(patch, dict):
            raise errors.bad_request("a merge patch must be a JSON object")
        return patching.merge_patch(current, patch)
    if fmt is negotiation.BodyFormat.STRATEGIC_PATCH:
        return patching.strategic_merge_patch(rt.kind, current, patch)
    if fmt is negotiation.BodyFormat.JSON_PATCH:
        return patching.json_patch(current, patch)
    raise AssertionError(f"not a patch document format: {fmt}")  # apply goes to fieldmanaging


async def patch(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    neg = negotiate(request)
    fmt = negotiation.body_format(request.headers.get("Content-Type"), patch=True)
    if fmt is negotiation.BodyFormat.STRATEGIC_PATCH and rt.custom:
        raise errors.ApiError(
            statuses.failure(
                415,
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml",
            )
        )
    is_apply = fmt is negotiation.BodyFormat.APPLY_PATCH
    if is_apply and not request.query.get("fieldManager"):
        raise errors.invalid(
            "PatchOptions", "", "fieldManager: Required value: is required for apply patch"
        )
    who = writer(request, rt, rp, fieldmanaging.APPLY if is_apply else fieldmanaging.UPDATE)
    raw = await bodies.read(request, ctx.max_body_bytes)
    document = bodies.decode(raw, fmt, ctx.converter)
    if is_apply and not isinstance(document, dict):
        raise errors.bad_request("an apply patch must be a YAML or JSON object")
    assert rp.name is not None
    is_dry = dry_run(request.query)
    validation = field_validation(request.query)
    warnings: list[str] = []
    shape = fieldmanaging.shape_for(rt.kind, rt.schema, custom=rt.custom)
    existing = ctx.state.find(rt, rp.namespace, rp.name)
    if existing is None:
        if not is_apply or rp.subresource is not None:
            raise errors.not_found(rt.resource, rp.name, rt.group)
        document.setdefault("metadata", {}).setdefault("name", rp.name)
        drop_status_on_create(rt, document)
        fresh = fieldmanaging.apply(
            shape, None, document, [], who, ctx.state.clock(), has_status=rt.has_status
        )
        stored = ctx.state.create_object(
            rt,
            fresh.obj,
            namespace=rp.namespace,
            dry_run=is_dry,
            field_validation=validation,
            warnings=warnings,
            managed=fresh.managed,
        )
        return written(ctx, rt, stored, neg, warnings, status=201)
    if rp.subresource == "scale":
        return await _patch_scale(ctx, rt, rp, existing, fmt, document, is_dry)
    current = conversion.from_storage(rt, existing.copy())
    managed: list[fieldmanaging.Entry] | None = None
    if is_apply:
        try:
            entries = fieldmanaging.decode(current["metadata"].get("managedFields"))
        except ValueError:
            entries = []
        applied = fieldmanaging.apply(
            shape, current, document, entries, who, ctx.state.clock(), has_status=rt.has_status
        )
        patched: Any = applied.obj
        managed = applied.managed
    else:
        patched = apply_patch_document(rt, fmt, current, document)
    if not isinstance(patched, dict):
        raise errors.invalid(rt.kind, rp.name, "the patch turned the object into a non-object")
    if nesting.depth(patched) > nesting.MAX_DEPTH:  # a JSON patch can nest a value in another
        message = f"the patched object would be nested deeper than {nesting.MAX_DEPTH} levels"
        raise errors.invalid(rt.kind, rp.name, message)
    patched.setdefault("metadata", {})
    # Apply never carries an optimistic lock unless the applied object names one.
    if is_apply and not (document.get("metadata") or {}).get("resourceVersion"):
        patched["metadata"]["resourceVersion"] = str(existing.rv)
    stored, _ = ctx.state.update_object(
        rt,
        patched,
        namespace=rp.namespace,
        name=rp.name,
        subresource=rp.subresource,
        dry_run=is_dry,
        field_validation=validation,
        warnings=warnings,
        writer=who,
        managed=managed,
    )
    return written(ctx, rt, stored, neg, warnings)


def scale_of(rt: resources.ResourceType, stored: storage.Stored) -> dict[str, Any]:
    obj = stored.obj
    meta = obj["metadata"]
    match = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": int((obj.get("spec") or {}).get("replicas") or 0)},
        "status": {
            "replicas": int((obj.get("status") or {}).get("replicas") or 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(match.items())),
        },
    }


async def _patch_scale(
    ctx: context.ServerContext,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
    existing: storage.Stored,
    fmt: negotiation.BodyFormat,
    document: Any,
    is_dry: bool,
) -> web.StreamResponse:
    scale = apply_patch_document(rt, fmt, scale_of(rt, existing), document)
    return set_scale(ctx, rt, rp, existing, scale, is_dry)


def set_scale(
    ctx: context.ServerContext,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
    existing: storage.Stored,
    scale: Any,
    is_dry: bool,
) -> web.StreamResponse:
    replicas = (scale.get("spec") or {}).get("replicas") if isinstance(scale, dict) else None
    if not isinstance(replicas, int) or replicas < 0:
        raise errors.invalid("Scale", str(rp.name), "spec.replicas: must be a non-negative integer")
    obj = existing.copy()
    obj.setdefault("spec", {})["replicas"] = replicas
    want_rv = (
        ((scale.get("metadata") or {}).get("resourceVersion")) if isinstance(scale, dict) else None
    )
    obj["metadata"]["resourceVersion"] = want_rv or str(existing.rv)
    assert rp.name is not None
    stored, _ = ctx.state.update_object(
        rt, obj, namespace=rp.namespace, name=rp.name, dry_run=is_dry
    )
    return bodies.respond(scale_of(rt, stored))


def _delete_options(ctx: context.ServerContext, request: web.Request, raw: bytes) -> dict[str, Any]:
    """DeleteOptions from the body (JSON or, from Go clients, protobuf) and the query."""
    query = request.query
    options: dict[str, Any] = {}
    if raw.strip():
        fmt = negotiation.body_format(request.headers.get("Content-Type"), patch=False)
        try:
            decoded = bodies.decode(raw, fmt, ctx.converter)
        except errors.ApiError as e:
            raise errors.bad_request(f"couldn't decode DeleteOptions: {e}") from e
        if not isinstance(decoded, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        options = decoded
    if query.get("propagationPolicy"):
        options["propagationPolicy"] = query["propagationPolicy"]
    if options.get("orphanDependents") is True and "propagationPolicy" not in options:
        options["propagationPolicy"] = "Orphan"
    return options


def deleted_status(rt: resources.ResourceType, stored: storage.Stored) -> statuses.Status:
    return statuses.success(
        {
            "name": str(stored.meta.get("name", "")),
            "group": rt.group,
            "kind": rt.resource,
            "uid": stored.uid,
        }
    )


async def delete(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    neg = negotiate(request)
    raw = await bodies.read(request, ctx.max_body_bytes)
    options = _delete_options(ctx, request, raw)
    assert rp.name is not None
    stored, deleted = ctx.state.delete_object(
        rt,
        rp.namespace,
        rp.name,
        preconditions=options.get("preconditions"),
        propagation=options.get("propagationPolicy"),
        dry_run=dry_run(request.query, options),
    )
    if deleted and not rt.return_deleted_object:
        return bodies.respond(dict(deleted_status(rt, stored)), as_yaml=neg.yaml)
    return bodies.respond(encode_one(rt, stored, neg, now=ctx.state.clock()), as_yaml=neg.yaml)


async def delete_collection(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    if "deletecollection" not in rt.verbs:
        raise errors.method_not_allowed(f"deletecollection is not supported on {rt.qualified}")
    raw = await bodies.read(request, ctx.max_body_bytes)
    options = _delete_options(ctx, request, raw)
    result = ctx.state.list_objects(rt, list_filter(rt, rp, request.query))
    gone: list[storage.Stored] = []
    for s in result.items:
        try:
            stored, _ = ctx.state.delete_object(
                rt,
                s.meta.get("namespace"),
                str(s.meta["name"]),
                propagation=options.get("propagationPolicy"),
                dry_run=dry_run(request.query, options),
            )
        except errors.ApiError as e:
            if e.code != 404:
                raise
            continue
        gone.append(stored)
    listing = storage.ListResult(gone, ctx.state.resource_version)
    return bodies.respond(
        encode_list(rt, listing, negotiation.Negotiated(), now=ctx.state.clock(), include="Object")
    )
