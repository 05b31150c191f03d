"""The aiohttp application of one simulated apiserver: middlewares, non-resource endpoints, and
the dispatch of resource requests to ``crud``, ``watching``, ``subresources`` and ``execing``.

Middlewares, outermost first:

1. errors: an ``ApiError`` becomes its Status; any aiohttp HTTP error becomes a
   Status with the same code; an unexpected exception is logged and answered
   with a 500 Status (never a traceback on the wire).
2. authentication: client certificate, admin token, bootstrap token or ServiceAccount
   token; otherwise 401. ``/healthz``, ``/livez``, ``/readyz`` and ``/version`` are open
   (the apiserver's anonymous public-info role), and so is GET of
   ``kube-public/cluster-info`` (kubeadm's RBAC for join-token discovery). The insecure
   listener, when enabled, treats every caller as the admin.
3. throttling: a test's ``throttling.Throttle`` answers 429 as API Priority and Fairness
   does (``SimApiserver.throttle``).

Every answer is recorded in the apiserver's audit log when its headers go out
(``on_response_prepare``), so streams are recorded when they start.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from yurthub import statuses
from yurthub.testing.sim import (
    auditing,
    auth,
    bodies,
    context,
    crud,
    discoverydocs,
    errors,
    execing,
    negotiation,
    openapi,
    paths,
    pki,
    resources,
    subresources,
    watching,
)

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version"})
# kubeadm lets anonymous users read it (join-token discovery verifies its content).
CLUSTER_INFO_PATH = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
HEALTH_CHECKS = ("ping", "log", "etcd", "poststarthook/start-apiextensions-controllers")


def _not_found_path() -> errors.ApiError:
    return errors.ApiError(
        statuses.failure(
            404,
            "the server could not find the requested resource",
            details={
                "causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]
            },
        )
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except errors.ApiError as e:
        return bodies.status_response(e.status)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return bodies.status_response(statuses.failure(e.status, e.reason or "error"))
    except ConnectionResetError:
        # The client went away (aiohttp's write errors derive from it): nobody to answer.
        raise
    except Exception:
        # A bug in the sim: the client gets a Status, the test log gets the traceback.
        log.exception("internal error serving %s %s", request.method, request.path)
        return bodies.status_response(
            statuses.failure(500, "Internal error occurred: the simulated apiserver failed")
        )


def _peer_subject(request: web.Request) -> tuple[str, list[str]] | None:
    transport = request.transport
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject):
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return pki.subject_of_der(der)


def _is_secure(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and transport.get_extra_info("ssl_object") is not None


async def audit(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare``: one record per request when its status line goes out.

    Headers go out first for every answer, errors and streams included, so a watch
    or an exec session is recorded when it starts, not when it ends.
    """
    if isinstance(request, web.Request):
        _audit(request, response.status)


def _audit(request: web.Request, code: int) -> None:
    user = request.get(context.USER)
    parsed = paths.parse(request.path)
    resource = parsed if isinstance(parsed, paths.ResourcePath) else None
    watch = crud.flag(request.query, "watch") is True
    request.app[context.CONTEXT].audit.append(
        auditing.Record(
            user=user.name if user is not None else "",
            groups=user.groups if user is not None else (),
            verb=auditing.verb_of(request.method, resource, watch),
            path=request.path,
            code=code,
            user_agent=request.headers.get("User-Agent", ""),
            group=resource.group if resource else "",
            version=resource.version if resource else "",
            resource=resource.resource if resource else "",
            subresource=(resource.subresource or "") if resource else "",
            namespace=(resource.namespace or "") if resource else "",
            name=(resource.name or "") if resource else "",
        )
    )


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    ctx = request.app[context.CONTEXT]
    if request.transport is not None:
        ctx.transports.add(request.transport)
    if not _is_secure(request):
        request[context.USER] = auth.ADMIN
        return await handler(request)
    state = ctx.state
    user = auth.authenticate(
        authorization=request.headers.get("Authorization"),
        peer_subject=_peer_subject(request),
        admin_token=state.admin_token,
        issuer=state.tokens,
        lookup_sa=state.lookup_service_account,
        static_tokens=state.static_tokens,
        bootstrap=state.bootstrap_user,
    )
    if user is None:
        path = request.path.rstrip("/") or "/"
        public = path in PUBLIC_PATHS or (request.method == "GET" and path == CLUSTER_INFO_PATH)
        if public or path.split("/")[1:2] in (["healthz"], ["livez"], ["readyz"]):
            request[context.USER] = auth.User("system:anonymous", ("system:unauthenticated",))
            return await handler(request)
        raise errors.ApiError(statuses.failure(401, "Unauthorized"))
    request[context.USER] = user
    return await handler(request)


@web.middleware
async def throttle_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """429 for what a test's ``throttling.Throttle`` matches (after authentication: APF
    classifies by user), as API Priority and Fairness refuses."""
    throttles = request.app[context.CONTEXT].throttles
    if throttles:
        parsed = paths.parse(request.path)
        if isinstance(parsed, paths.ResourcePath):
            verb = auditing.verb_of(
                request.method, parsed, crud.flag(request.query, "watch") is True
            )
            user = request.get(context.USER)
            name = user.name if user is not None else ""
            agent = request.headers.get("User-Agent", "")
            for throttle in throttles:
                if throttle.matches(verb, parsed.resource, agent, name):
                    throttle.take()
                    content_type, body = throttle.body()
                    refused = web.Response(status=429, body=body)
                    refused.headers.update(throttle.headers())
                    refused.headers["Content-Type"] = content_type
                    return refused
    return await handler(request)


# --- non-resource endpoints ------------------------------------------------------------------


async def health(request: web.Request) -> web.StreamResponse:
    kind = request.path.strip("/").split("/")[0]
    if "verbose" in request.query:
        lines = [f"[+]{check} ok" for check in HEALTH_CHECKS]
        lines.append(f"{kind} check passed")
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
    return web.Response(text="ok", content_type="text/plain")


async def version(request: web.Request) -> web.StreamResponse:
    return bodies.respond(discoverydocs.version())


async def openid_configuration(request: web.Request) -> web.StreamResponse:
    """Service-account issuer discovery (authenticated; the sim has no RBAC to narrow it)."""
    return bodies.respond(
        {
            "issuer": auth.ISSUER,
            "jwks_uri": f"{auth.ISSUER}/openid/v1/jwks",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        }
    )


async def jwks(request: web.Request) -> web.StreamResponse:
    """As kube-apiserver: ``application/jwk-set+json``, 406 for an Accept that excludes it."""
    accept = request.headers.get("Accept", "")
    media = {part.split(";", 1)[0].strip() for part in accept.split(",")}
    if accept and not media & {"application/jwk-set+json", "*/*", "application/*"}:
        raise errors.ApiError(statuses.failure(406, "only application/jwk-set+json is served"))
    body = orjson.dumps(request.app[context.CONTEXT].state.tokens.jwks())
    return web.Response(body=body, content_type="application/jwk-set+json")


async def root(request: web.Request) -> web.StreamResponse:
    return bodies.respond(
        {
            "paths": [
                "/api",
                "/api/v1",
                "/apis",
                *(
                    f"/apis/{g}/{v}"
                    for g, vs in request.app[context.CONTEXT].state.registry.groups()
                    if g
                    for v in vs
                ),
                "/healthz",
                "/livez",
                "/openapi/v2",
                "/openapi/v3",
                "/readyz",
                "/version",
            ]
        }
    )


def _discovery(
    ctx: context.ServerContext, request: web.Request, gv: paths.GroupVersionPath
) -> web.StreamResponse:
    registry = ctx.state.registry
    if gv.version is None and gv.group in ("", None):
        neg = negotiation.negotiate(request.headers.get("Accept"), discovery=True)
        if neg.form is negotiation.Form.DISCOVERY_V2:
            doc = discoverydocs.aggregated(registry, legacy=gv.legacy, version=neg.version)
            return bodies.respond(doc, content_type=neg.content_type)
        if gv.legacy:
            return bodies.respond(discoverydocs.api_versions(ctx.server_address), as_yaml=neg.yaml)
        return bodies.respond(discoverydocs.api_group_list(registry), as_yaml=neg.yaml)
    neg = negotiation.negotiate(request.headers.get("Accept"))
    if gv.version is None:
        assert gv.group is not None
        group_doc = discoverydocs.api_group(registry, gv.group)
        if group_doc is None:
            raise _not_found_path()
        return bodies.respond(group_doc, as_yaml=neg.yaml)
    listing = discoverydocs.resource_list(registry, gv.group or "", gv.version)
    if listing is None:
        raise _not_found_path()
    return bodies.respond(listing, as_yaml=neg.yaml)


# --- resources -------------------------------------------------------------------------------


async def api(request: web.Request) -> web.StreamResponse:
    ctx = request.app[context.CONTEXT]
    parsed = paths.parse(request.path)
    if parsed is None:
        raise _not_found_path()
    if isinstance(parsed, paths.GroupVersionPath):
        if request.method != "GET":
            raise errors.method_not_allowed(f"{request.method} is not supported on discovery")
        return _discovery(ctx, request, parsed)
    rt = ctx.state.registry.get(parsed.group, parsed.version, parsed.resource)
    if rt is None or (parsed.namespace is not None and not rt.namespaced):
        raise _not_found_path()
    if parsed.subresource is not None and parsed.subresource not in rt.subresources:
        raise _not_found_path()
    if rt.virtual:
        if request.method != "POST" or parsed.name is not None:
            raise errors.method_not_allowed(f"only create is supported on {rt.qualified}")
        return await subresources.review(ctx, request, rt, request[context.USER])
    return await _dispatch(ctx, request, rt, parsed)


async def _dispatch(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    method, sub = request.method, rp.subresource
    if sub == "exec":
        if method not in ("GET", "POST"):
            raise errors.method_not_allowed(f"{method} is not supported on pods/exec")
        return await execing.exec_(ctx, request, rt, rp)
    if method == "GET":
        if rp.name is None or rp.watch_prefix or crud.flag(request.query, "watch"):
            if rp.watch_prefix or crud.flag(request.query, "watch"):
                return await watching.watch(ctx, request, rt, rp)
            return await crud.list_(ctx, request, rt, rp)
        if sub == "log":
            return await subresources.logs(ctx, request, rt, rp)
        if sub == "scale":
            return await subresources.get_scale(ctx, request, rt, rp)
        if sub in ("token", "binding", "eviction", "finalize"):
            raise errors.method_not_allowed(f"GET is not supported on {rt.resource}/{sub}")
        return await crud.get(ctx, request, rt, rp)
    if method == "POST":
        if sub == "token":
            return await subresources.token(ctx, request, rt, rp)
        if sub == "binding":
            return await subresources.binding(ctx, request, rt, rp)
        if sub == "eviction":
            return await subresources.eviction(ctx, request, rt, rp)
        if rp.name is not None:
            raise errors.method_not_allowed(
                f"POST is not supported on a named {rt.kind}; use PUT or PATCH"
            )
        return await crud.create(ctx, request, rt, rp)
    if rp.name is None:
        if method == "DELETE":
            return await crud.delete_collection(ctx, request, rt, rp)
        raise errors.method_not_allowed(f"{method} is not supported on a {rt.kind} collection")
    if sub in ("log", "token", "binding", "eviction"):
        raise errors.method_not_allowed(f"{method} is not supported on {rt.resource}/{sub}")
    if method == "PUT":
        if sub == "approval":
            return await subresources.approval(ctx, request, rt, rp)
        if sub == "scale":
            return await subresources.put_scale(ctx, request, rt, rp)
        return await crud.update(ctx, request, rt, rp)
    if method == "PATCH":
        response = await crud.patch(ctx, request, rt, rp)
        if sub == "approval":
            subresources.sign_if_approved(
                ctx.state, rt, ctx.state.get_object(rt, None, str(rp.name))
            )
        return response
    if method == "DELETE":
        if sub is not None:
            raise errors.method_not_allowed(f"DELETE is not supported on {rt.resource}/{sub}")
        return await crud.delete(ctx, request, rt, rp)
    raise errors.method_not_allowed(f"{method} is not supported")


async def fallback(request: web.Request) -> web.StreamResponse:
    raise _not_found_path()


def build_app(ctx: context.ServerContext) -> web.Application:
    # The body limit is enforced by bodies.read (413 as a Status), not by aiohttp.
    app = web.Application(
        middlewares=[error_middleware, auth_middleware, throttle_middleware],
        client_max_size=ctx.max_body_bytes + 1,
    )
    app[context.CONTEXT] = ctx
    app.on_response_prepare.append(audit)
    for prefix in ("healthz", "livez", "readyz"):
        app.router.add_get(f"/{prefix}", health)
        app.router.add_get(f"/{prefix}/{{check:.*}}", health)
    app.router.add_get("/version", version)
    app.router.add_get("/version/", version)
    app.router.add_get("/.well-known/openid-configuration", openid_configuration)
    app.router.add_get("/openid/v1/jwks", jwks)
    app.router.add_get("/", root)
    app.router.add_get("/openapi/v2", openapi.v2)
    app.router.add_get("/openapi/v3", openapi.v3_index)
    app.router.add_get("/openapi/v3/{path:.+}", openapi.v3_document)
    app.router.add_route("*", "/api", api)
    app.router.add_route("*", "/api/{tail:.*}", api)
    app.router.add_route("*", "/apis", api)
    app.router.add_route("*", "/apis/{tail:.*}", api)
    app.router.add_route("*", "/{tail:.*}", fallback)
    return app
