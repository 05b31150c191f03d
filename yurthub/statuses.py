"""Kubernetes ``Status`` objects: the only shape an error may take on the wire.

Pure: builds dicts and bytes, never touches sockets. Both the hub and the
simulated apiserver answer every error through here, so a client sees the same
``reason`` for the same HTTP code wherever the error came from.

Messages end up in client logs and ``kubectl`` output: never put a token,
a certificate key or a Secret payload into one.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import orjson

# HTTP code -> the StatusReason a real apiserver uses for it.
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class StatusDetails(TypedDict, total=False):
    name: str
    group: str
    kind: str
    uid: str
    causes: list[dict[str, str]]
    retryAfterSeconds: int


class Status(TypedDict):
    kind: str
    apiVersion: str
    metadata: dict[str, Any]
    status: str
    message: str
    reason: str
    code: int
    details: NotRequired[StatusDetails]


def failure(
    code: int,
    message: str,
    *,
    reason: str | None = None,
    details: StatusDetails | None = None,
) -> Status:
    """A ``Failure`` Status for HTTP ``code``; ``reason`` defaults by code."""
    status: Status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else REASONS.get(code, ""),
        "code": code,
    }
    if details:
        status["details"] = details
    return status


def success(details: StatusDetails | None = None) -> Status:
    """The ``Success`` Status a delete answers with when no object is returned."""
    status: Status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "message": "",
        "reason": "",
        "code": 200,
    }
    if details:
        status["details"] = details
    return status


def not_found(resource: str, name: str, group: str = "") -> Status:
    """The apiserver's NotFound wording: ``pods "x" not found`` (group-qualified)."""
    qualified = f"{resource}.{group}" if group else resource
    what = f'{qualified} "{name}"' if name else qualified
    return failure(
        404,
        f"{what} not found",
        details={"name": name, "group": group, "kind": resource},
    )


def already_exists(resource: str, name: str, group: str = "") -> Status:
    qualified = f"{resource}.{group}" if group else resource
    return failure(
        409,
        f'{qualified} "{name}" already exists',
        reason="AlreadyExists",
        details={"name": name, "group": group, "kind": resource},
    )


def conflict(resource: str, name: str, group: str = "", why: str = "") -> Status:
    qualified = f"{resource}.{group}" if group else resource
    message = f'Operation cannot be fulfilled on {qualified} "{name}"'
    if why:
        message = f"{message}: {why}"
    return failure(
        409,
        message,
        reason="Conflict",
        details={"name": name, "group": group, "kind": resource},
    )


def encode(status: Status) -> bytes:
    return orjson.dumps(status)


def is_status(obj: object) -> bool:
    """True for a decoded ``Status`` object (an error or success answer)."""
    return isinstance(obj, dict) and obj.get("kind") == "Status" and obj.get("apiVersion") == "v1"
