"""The one error the simulated apiserver raises: an ``ApiError`` carrying a Kubernetes ``Status``.

Storage, patching and request parsing raise it; the HTTP layer turns it into a
response with ``status.code`` and the Status as body. Tests that mutate
``sim.state`` directly catch it and look at ``.code`` / ``.reason``.
"""

from __future__ import annotations

from yurthub import statuses


class ApiError(Exception):
    """A request the apiserver refuses; ``status`` is the body it answers with."""

    def __init__(self, status: statuses.Status) -> None:
        super().__init__(status["message"])
        self.status = status

    @property
    def code(self) -> int:
        return self.status["code"]

    @property
    def reason(self) -> str:
        return self.status["reason"]


def bad_request(message: str) -> ApiError:
    return ApiError(statuses.failure(400, message))


def invalid(kind: str, name: str, message: str, group: str = "") -> ApiError:
    """422 Invalid, worded as the apiserver does: ``Pod "x" is invalid: <why>``."""
    return ApiError(
        statuses.failure(
            422,
            f'{kind} "{name}" is invalid: {message}',
            details={"name": name, "group": group, "kind": kind},
        )
    )


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(statuses.not_found(resource, name, group))


def method_not_allowed(message: str) -> ApiError:
    return ApiError(statuses.failure(405, message))


def expired(message: str) -> ApiError:
    return ApiError(statuses.failure(410, message, reason="Expired"))
