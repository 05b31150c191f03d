"""Request bodies in, JSON/YAML out: bounded reads, decoding with clear 400/413/415 errors.

A body is read in chunks up to ``max_body_bytes``; one byte more and the answer
is 413 without reading the rest. JSON is decoded with orjson, YAML with PyYAML's
safe loader (C-accelerated when available). A decoded body nested deeper than
``nesting.MAX_DEPTH`` is a 400: the simulator could not store it (orjson encodes 254
levels) and walks it recursively (defaulting, patches).
"""

from __future__ import annotations

from typing import Any

import multidict
import orjson
import yaml
from aiohttp import web

from inputbounds import nesting
from yurthub import statuses
from yurthub.kubeproto import converting
from yurthub.testing.sim import errors, negotiation

_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def too_large(limit: int) -> errors.ApiError:
    return errors.ApiError(statuses.failure(413, f"Request entity too large: limit is {limit}"))


async def read(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await request.content.read(64 * 1024)
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def decode(raw: bytes, fmt: negotiation.BodyFormat, converter: converting.Converter) -> Any:
    value = _decoded(raw, fmt, converter)
    try:
        nesting.check(value)
    except nesting.TooDeep as e:
        raise errors.bad_request(f"the request body is {e}") from e
    return value


def _decoded(raw: bytes, fmt: negotiation.BodyFormat, converter: converting.Converter) -> Any:
    if not raw.strip():
        raise errors.bad_request("the request body is empty")
    if fmt is negotiation.BodyFormat.PROTOBUF:
        try:
            return converter.object(raw)
        except converting.Undecodable as e:
            raise errors.ApiError(
                statuses.failure(
                    415,
                    f"the simulated apiserver could not decode the protobuf body: {e}; "
                    "send application/json instead",
                )
            ) from e
    if fmt in (negotiation.BodyFormat.YAML, negotiation.BodyFormat.APPLY_PATCH):
        try:
            return yaml.load(raw, Loader=_YamlLoader)  # a safe loader
        except yaml.YAMLError as e:
            raise errors.bad_request(f"error converting YAML to JSON: {e}") from e
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {e}") from e


GZIP_THRESHOLD = 128 << 10
"""kube-apiserver compresses a response body over 128 KiB for a client that accepts gzip."""


def accepts_gzip(request: web.BaseRequest) -> bool:
    codings = request.headers.get("Accept-Encoding", "")
    for clause in codings.split(","):
        name, _, params = clause.strip().partition(";")
        if name.strip().lower() == "gzip" and params.replace(" ", "") not in ("q=0", "q=0.0"):
            return True
    return False


def compress_large(request: web.BaseRequest, response: web.Response) -> web.Response:
    """gzip ``response`` as kube-apiserver would: only over the threshold, only gzip."""
    body = response.body
    if isinstance(body, bytes) and len(body) > GZIP_THRESHOLD and accepts_gzip(request):
        response.enable_compression(web.ContentCoding.gzip)
    return response


def dump_yaml(obj: Any) -> bytes:
    return yaml.safe_dump(obj, sort_keys=False).encode()


def respond(
    body: bytes | Any,
    *,
    status: int = 200,
    as_yaml: bool = False,
    content_type: str = "application/json",
    warnings: list[str] | None = None,
) -> web.Response:
    """A response from pre-encoded JSON bytes or a JSON-able value (YAML if asked).

    ``warnings`` become ``Warning: 299 - "..."`` headers, which kubectl prints.
    """
    headers = multidict.CIMultiDict({"Content-Type": content_type})
    for text in warnings or ():
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        headers.add("Warning", f'299 - "{escaped}"')
    if as_yaml:
        value = orjson.loads(body) if isinstance(body, bytes) else body
        headers["Content-Type"] = "application/yaml"
        return web.Response(body=dump_yaml(value), status=status, headers=headers)
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    return web.Response(body=data, status=status, headers=headers)


def status_response(status: statuses.Status) -> web.Response:
    return web.Response(
        body=statuses.encode(status),
        status=status["code"],
        headers={"Content-Type": "application/json"},
    )
