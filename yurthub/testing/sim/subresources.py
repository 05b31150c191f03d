"""Subresources with behaviour of their own, and the review resources that are never stored.

- ``pods/log``: text/plain lines from ``State.logs``; ``follow`` streams new lines
  until the client disconnects or the pod is deleted; ``tailLines``,
  ``timestamps``, ``limitBytes``, ``sinceSeconds``.
- ``serviceaccounts/token``: TokenRequest -> a JWT the sim accepts as that SA.
- ``pods/binding`` (sets nodeName), ``pods/eviction`` (deletes the pod).
- ``certificatesigningrequests/approval``: the approval write, then the signer
  controller's write: an approved CSR for a kube-apiserver-client or kubelet
  signer gets ``status.certificate`` signed by the sim CA.
- ``*/scale`` for workloads with replicas.
- SelfSubjectReview, TokenReview, (Self)SubjectAccessReview,
  SelfSubjectRulesReview: answered from the caller's identity; every access
  review is allowed because the sim has no authorization.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
from typing import Any

from aiohttp import web

from yurthub import statuses
from yurthub.testing.sim import (
    auth,
    bodies,
    certificates,
    context,
    crud,
    errors,
    objectmeta,
    paths,
    pki,
    resources,
    storage,
)

log = logging.getLogger(__name__)

SIGNED_BY_SIM = frozenset(
    {
        "kubernetes.io/kube-apiserver-client",
        "kubernetes.io/kube-apiserver-client-kubelet",
        "kubernetes.io/kubelet-serving",
    }
)
MIN_TOKEN_SECONDS = 600


# --- logs ------------------------------------------------------------------------------------


def container_of(pod: storage.Stored, requested: str | None) -> str:
    spec = pod.obj.get("spec") or {}
    names = [str(c.get("name")) for c in spec.get("containers") or [] if isinstance(c, dict)]
    names += [str(c.get("name")) for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    name = str(pod.meta.get("name"))
    if requested:
        if requested not in names:
            raise errors.bad_request(f"container {requested} is not valid for pod {name}")
        return requested
    if len(names) == 1:
        return names[0]
    if not names:
        raise errors.bad_request(f"pod {name} has no containers")
    default = (pod.meta.get("annotations") or {}).get("kubectl.kubernetes.io/default-container")
    if default in names:
        return str(default)
    raise errors.bad_request(
        f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
    )


def _format_line(ts: float, line: str, timestamps: bool) -> bytes:
    if not timestamps:
        return (line + "\n").encode()
    when = datetime.datetime.fromtimestamp(ts, datetime.UTC)
    return f"{when.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {line}\n".encode()


async def logs(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    assert rp.name is not None and rp.namespace is not None
    query = request.query
    pod = ctx.state.get_object(rt, rp.namespace, rp.name)
    container = container_of(pod, query.get("container"))
    if crud.flag(query, "previous"):
        raise errors.bad_request(
            f'previous terminated container "{container}" in pod "{rp.name}" not found'
        )
    tail = None
    if query.get("tailLines") not in (None, ""):
        tail = crud.int_param(query, "tailLines")
    timestamps = bool(crud.flag(query, "timestamps"))
    limit_bytes = crud.int_param(query, "limitBytes")
    since = crud.int_param(query, "sinceSeconds")
    cutoff = ctx.state.clock() - since if since is not None else None
    book = ctx.state.logs
    if not crud.flag(query, "follow"):
        lines = book.lines(rp.namespace, rp.name, container, tail=tail)
        body = b"".join(
            _format_line(ts, line, timestamps)
            for ts, line in lines
            if cutoff is None or ts >= cutoff
        )
        if limit_bytes is not None:
            body = body[:limit_bytes]
        return web.Response(body=body, content_type="text/plain")
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    task = ctx.track_stream()
    sent = 0
    try:
        async for ts, line in book.follow(rp.namespace, rp.name, container, tail=tail):
            if cutoff is not None and ts < cutoff:
                continue
            data = _format_line(ts, line, timestamps)
            if limit_bytes is not None:
                data = data[: max(0, limit_bytes - sent)]
            await response.write(data)
            sent += len(data)
            if limit_bytes is not None and sent >= limit_bytes:
                break
    except (ConnectionResetError, RuntimeError) as e:
        log.debug("log follower disconnected: %s", e)
    finally:
        ctx.untrack_stream(task)
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response


# --- tokens, binding, eviction -------------------------------------------------------------


async def token(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    assert rp.name is not None and rp.namespace is not None
    sa = ctx.state.get_object(rt, rp.namespace, rp.name)
    body = await crud.read_object(ctx, request)
    if not isinstance(body, dict):
        raise errors.bad_request("the body must be a TokenRequest object")
    spec = body.get("spec") or {}
    seconds = spec.get("expirationSeconds")
    if seconds is None:  # absent, or null (a Go client's nil pointer: Go writes null)
        seconds = 3600
    if not isinstance(seconds, int) or seconds < MIN_TOKEN_SECONDS:
        raise errors.invalid(
            "TokenRequest",
            rp.name,
            f"spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less "
            "than 10 minutes",
            "authentication.k8s.io",
        )
    audiences = [str(a) for a in spec.get("audiences") or ()] or [auth.ISSUER]
    issued, expiry = ctx.state.tokens.issue(
        auth.ServiceAccountRef(rp.namespace, rp.name, sa.uid),
        audiences=audiences,
        expiration_seconds=seconds,
        now=ctx.state.clock(),
    )
    answer = {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": rp.name,
            "namespace": rp.namespace,
            "creationTimestamp": objectmeta.timestamp(ctx.state.clock()),
        },
        "spec": {
            "audiences": audiences,
            "expirationSeconds": seconds,
            "boundObjectRef": spec.get("boundObjectRef"),
        },
        "status": {"token": issued, "expirationTimestamp": objectmeta.timestamp(expiry)},
    }
    return bodies.respond(answer, status=201)


async def binding(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    assert rp.name is not None
    body = await crud.read_object(ctx, request)
    target = (body.get("target") or {}) if isinstance(body, dict) else {}
    node = target.get("name")
    if not node:
        raise errors.invalid("Binding", rp.name, "target.name: Required value")
    pod = ctx.state.get_object(rt, rp.namespace, rp.name)
    current = (pod.obj.get("spec") or {}).get("nodeName")
    if current:
        raise errors.ApiError(
            statuses.conflict(
                "pods", rp.name, why=f'pod {rp.name} is already assigned to node "{current}"'
            )
        )
    obj = pod.copy()
    obj["spec"]["nodeName"] = str(node)
    ctx.state.update_object(rt, obj, namespace=rp.namespace, name=rp.name)
    return bodies.respond(dict(statuses.success()), status=201)


async def eviction(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    assert rp.name is not None
    await bodies.read(request, ctx.max_body_bytes)
    ctx.state.delete_object(rt, rp.namespace, rp.name)
    return bodies.respond(dict(statuses.success()), status=201)


# --- CSR approval and signing ----------------------------------------------------------------


def sign_if_approved(state: storage.State, rt: resources.ResourceType, csr: storage.Stored) -> None:
    """The CSR signing controller: sign approved requests for the built-in signers."""
    status = csr.obj.get("status") or {}
    conditions = status.get("conditions") or []
    types = {c.get("type") for c in conditions if c.get("status", "True") == "True"}
    spec = csr.obj.get("spec") or {}
    if "Approved" not in types or "Denied" in types or "Failed" in types:
        return
    if status.get("certificate") or spec.get("signerName") not in SIGNED_BY_SIM:
        return
    obj = csr.copy()
    usages = [str(u) for u in spec.get("usages") or ()]
    try:
        problem = certificates.signer_problem(
            str(spec["signerName"]), certificates.parse_request(spec), usages
        )
        if problem is not None:
            raise pki.CertificateError(problem)
        request_pem = base64.b64decode(str(spec.get("request", "")))
        lifetime = datetime.timedelta(seconds=int(spec.get("expirationSeconds") or 365 * 86400))
        cert = state.authority.sign_request(request_pem, usages=usages, lifetime=lifetime)
    except (ValueError, pki.CertificateError) as e:
        obj["status"].setdefault("conditions", []).append(
            {
                "type": "Failed",
                "status": "True",
                "reason": "SignerValidationFailure",
                "message": str(e),
                "lastUpdateTime": objectmeta.timestamp(state.clock()),
            }
        )
    else:
        obj["status"]["certificate"] = base64.b64encode(cert).decode()
    state.update_object(rt, obj, namespace=None, name=str(csr.meta["name"]), subresource="status")


async def approval(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    response = await crud.update(ctx, request, rt, rp)
    assert rp.name is not None
    sign_if_approved(ctx.state, rt, ctx.state.get_object(rt, None, rp.name))
    return response


# --- scale -----------------------------------------------------------------------------------


async def get_scale(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    assert rp.name is not None
    return bodies.respond(crud.scale_of(rt, ctx.state.get_object(rt, rp.namespace, rp.name)))


async def put_scale(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    assert rp.name is not None
    scale = await crud.read_object(ctx, request)
    existing = ctx.state.get_object(rt, rp.namespace, rp.name)
    return crud.set_scale(ctx, rt, rp, existing, scale, crud.dry_run(request.query))


# --- reviews ---------------------------------------------------------------------------------


async def review(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    user: auth.User,
) -> web.StreamResponse:
    body = await crud.read_object(ctx, request)
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body must be a {rt.kind} object")
    answer: dict[str, Any] = {
        "kind": rt.kind,
        "apiVersion": rt.api_version,
        "metadata": {"creationTimestamp": None},
        "spec": body.get("spec") or {},
    }
    if rt.resource == "selfsubjectreviews":
        answer.pop("spec")
        answer["status"] = {"userInfo": user.as_user_info()}
    elif rt.resource == "tokenreviews":
        token_text = str((body.get("spec") or {}).get("token") or "")
        found = None
        if token_text and token_text == ctx.state.admin_token:
            found = auth.ADMIN
        elif token_text:
            found = auth.user_for_token(
                token_text,
                issuer=ctx.state.tokens,
                lookup_sa=ctx.state.lookup_service_account,
            )
        answer["status"] = (
            {"authenticated": True, "user": found.as_user_info(), "audiences": [auth.ISSUER]}
            if found is not None
            else {"authenticated": False, "error": "invalid bearer token"}
        )
    elif rt.resource == "selfsubjectrulesreviews":
        answer["status"] = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
    else:
        answer["status"] = {
            "allowed": True,
            "reason": "the simulated apiserver allows every authenticated user everything",
        }
    return bodies.respond(answer, status=201)
