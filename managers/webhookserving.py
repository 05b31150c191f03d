"""The Configuration validating admission webhook, served over HTTPS by every replica.

``POST /validate`` (Akri's path) takes an ``admission.k8s.io/v1`` AdmissionReview of an
akri.sh Configuration and answers allowed, or denied with every problem found, each naming its
field (``configvalidating``). After the static checks pass, the objects the broker controller
would create for the Configuration (a broker Pod or Job for a stand-in Instance, its
Services) are created with ``dryRun=All`` and ``fieldValidation=Strict`` as this manager:
the apiserver's full validation (and admission: pod security, quotas) of a broker spec,
nothing stored. When the apiserver cannot be asked (unreachable, timeout, this manager lacks a
permission) the Configuration is allowed with a warning: the controller reports a bad broker
spec later as an Event on it.

The serving certificate and key are files (a mounted Secret); every ``reload_interval`` they
are checked and, when they changed, loaded into a new TLS context that new connections get
(rotation without a restart; a broken new pair is logged and the old one kept). Files that do
not exist yet are waited for (an optional Secret volume is filled when the Secret is
created): the port is bound at once, handshakes fail until a pair is loaded, and ``/readyz``
says it is waiting. Files that exist but do not load at startup are a startup error.

Bounded: request bodies up to ``MAX_BODY`` bytes, ``max_concurrent`` reviews at once (more
answer 429 and the apiserver applies the webhook's failurePolicy), each dry-run within
``dry_run_timeout`` seconds, details parsing in a worker thread.

Who can reach it: anything that reaches the port. It needs no credentials (as every webhook
the apiserver calls without a client certificate); what it answers concerns only the object
sent, and the dry-runs it makes store nothing. THREAT_MODEL.md has more.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import ssl
import time
from typing import Any

import orjson
from aiohttp import web

from kubecontrol import kubeapi
from managers import brokerobjects as objects
from managers import configvalidating, metrics, serving, settings

logger = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
"""An AdmissionReview holds the object twice (old and new); etcd refuses objects over 1.5 MiB."""
PATH = "/validate"

_RESOURCES = {"pods": kubeapi.PODS, "jobs": kubeapi.JOBS, "services": kubeapi.SERVICES}


class WebhookError(Exception):
    """The webhook cannot start (certificate files unusable, port in use)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Stamp:
    cert: tuple[int, int, int]
    key: tuple[int, int, int]


def _stamp(cert: os.PathLike[str], key: os.PathLike[str]) -> _Stamp:
    def one(path: os.PathLike[str]) -> tuple[int, int, int]:
        st = os.stat(path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    return _Stamp(one(cert), one(key))


def _context(cert: os.PathLike[str], key: os.PathLike[str]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(os.fspath(cert), os.fspath(key))
    return context


class Certificates:
    """The serving pair, reloaded when the files change; ``context`` is what the listener
    uses: it hands each new connection the latest pair."""

    def __init__(self, cert: os.PathLike[str], key: os.PathLike[str]) -> None:
        self.cert = cert
        self.key = key
        self._current: ssl.SSLContext | None = None
        self._stamp: _Stamp | None = None
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        # Called on every handshake, with or without SNI (the apiserver sends none for an
        # IP address): switch the connection to the current pair.
        self.context.sni_callback = self._select
        self.reloads = 0

    def _select(self, connection: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        if self._current is not None:
            connection.context = self._current

    def _load(self) -> tuple[ssl.SSLContext, _Stamp]:
        stamp = _stamp(self.cert, self.key)
        return _context(self.cert, self.key), stamp

    @property
    def loaded(self) -> bool:
        return self._current is not None

    async def load(self) -> bool:
        """First load: False when the files do not exist yet (waited for); raises
        ``WebhookError`` naming the files when they exist but do not load."""
        try:
            current, stamp = await asyncio.to_thread(self._load)
        except FileNotFoundError:
            logger.warning(
                "the webhook waits for its serving certificate %s and key %s (create the "
                "Secret they come from); handshakes fail until then",
                os.fspath(self.cert),
                os.fspath(self.key),
            )
            return False
        except (OSError, ssl.SSLError, ValueError) as e:
            raise WebhookError(
                f"cannot load the webhook certificate {os.fspath(self.cert)} / key "
                f"{os.fspath(self.key)}: {e}"
            ) from e
        self._current, self._stamp = current, stamp
        return True

    async def reload_if_changed(self) -> bool:
        try:
            stamp = await asyncio.to_thread(_stamp, self.cert, self.key)
        except FileNotFoundError:
            return False  # not there (yet, or mid-rotation): the next check looks again
        except OSError as e:
            logger.warning("webhook certificate files unreadable (%s); keeping the loaded pair", e)
            return False
        if stamp == self._stamp:
            return False
        try:
            current, stamp = await asyncio.to_thread(self._load)
        except (OSError, ssl.SSLError, ValueError) as e:
            # Often a rotation caught between writing the two files: the next check retries.
            logger.warning("new webhook certificate not loaded (%s); keeping the previous one", e)
            return False
        first = self._current is None
        self._current, self._stamp = current, stamp
        self.reloads += 1
        logger.info(
            "webhook serving certificate %s from %s",
            "loaded" if first else "reloaded",
            os.fspath(self.cert),
        )
        return True

    async def watch(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            await self.reload_if_changed()


class Validator:
    """Answers reviews: static checks, then dry-run creates of the sample objects."""

    def __init__(
        self, api: kubeapi.KubeApi, own: settings.Webhook, manager_metrics: metrics.Metrics
    ) -> None:
        self.api = api
        self.settings = own
        self.metrics = manager_metrics
        self.active = 0

    async def review(self, doc: object) -> dict[str, Any]:
        request = configvalidating.parse_review(doc)
        too_deep = configvalidating.nesting_problems(request)
        if too_deep:
            return configvalidating.response(request, too_deep)
        if not configvalidating.needs_check(request):
            return configvalidating.response(request, [])
        configuration = request.object
        if configuration is None:
            problem = configvalidating.Problem("object", "the review carries no Configuration")
            return configvalidating.response(request, [problem])
        warnings: list[str] = []
        problems = await asyncio.to_thread(configvalidating.check, configuration, warnings)
        if not problems:
            namespace = request.namespace or objects.namespace_of(configuration) or "default"
            problems, sampled = await self._dry_run(configuration, namespace)
            warnings.extend(sampled)
        return configvalidating.response(request, problems, warnings)

    async def _dry_run(
        self, configuration: Any, namespace: str
    ) -> tuple[list[configvalidating.Problem], list[str]]:
        problems: list[configvalidating.Problem] = []
        warnings: list[str] = []
        try:
            samples = configvalidating.samples(configuration)
        except objects.SpecError as e:  # check() already built them; kept for safety
            return [configvalidating.Problem(e.field, e.message)], []
        for sample in samples:
            body = dict(sample.body)
            meta = dict(body["metadata"])
            # A generated name never collides with an existing object of that name.
            meta["generateName"] = f"{meta.pop('name')[:200]}-"
            meta["namespace"] = namespace
            body["metadata"] = meta
            try:
                async with asyncio.timeout(self.settings.dry_run_timeout):
                    await self.api.create(
                        _RESOURCES[sample.kind], namespace, body, dry_run=True, strict=True
                    )
            except TimeoutError:
                warnings.append(f"{sample.field} was not checked: the apiserver did not answer")
            except kubeapi.KubeError as e:
                detail = e.detail or str(e)
                if e.status in (400, 422) or (e.status == 403 and "cannot create" not in detail):
                    problems.append(configvalidating.explain_refusal(sample, detail))
                else:
                    warnings.append(f"{sample.field} was not checked: {detail}")
        return problems, warnings


async def serve(
    validator: Validator, certificates: Certificates, host: str, port: int
) -> tuple[web.AppRunner, int]:
    """Start serving ``POST /validate``; returns the runner (the caller cleans it up) and
    the bound port."""
    own = validator.settings

    async def validate(request: web.Request) -> web.Response:
        if validator.active >= own.max_concurrent:
            return web.Response(status=429, text="too many reviews in progress\n")
        validator.active += 1
        started = time.monotonic()
        try:
            if request.content_type not in ("application/json", ""):
                return web.Response(status=415, text="send application/json\n")
            try:
                doc = orjson.loads(await request.read())
                answer = await validator.review(doc)
            except (orjson.JSONDecodeError, configvalidating.BadReview) as e:
                return web.Response(status=400, text=f"{e}\n")
            allowed = bool(answer["response"]["allowed"])
            validator.metrics.webhook_reviews.labels("true" if allowed else "false").inc()
            if not allowed:
                logger.info(
                    "webhook denied Configuration %s: %s",
                    _described(doc),
                    answer["response"]["status"]["message"],
                )
            return web.Response(body=orjson.dumps(answer), content_type="application/json")
        finally:
            validator.active -= 1
            validator.metrics.webhook_seconds.observe(time.monotonic() - started)

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post(PATH, validate)
    runner, bound = await serving.start(app, host, port, certificates.context)
    logger.info("serving the Configuration webhook on https://%s:%d%s", host, bound, PATH)
    return runner, bound


def _described(doc: Any) -> str:
    with contextlib.suppress(AttributeError, TypeError, KeyError):
        request = doc["request"]
        return f"{request.get('namespace', '')}/{request.get('name', '')}"
    return "?"
