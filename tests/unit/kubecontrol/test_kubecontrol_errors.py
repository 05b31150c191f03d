"""``kubeapi._error``: an apiserver's (or a hub's) refusal keeps its explanation: a bare
"HTTP 503" told an operator nothing about a hub that was not ready or had no cache."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client import exceptions as k8s_exceptions

from kubecontrol import kubeapi


def _refusal(status: int, reason: str, message: str | None) -> k8s_exceptions.ApiException:
    e = k8s_exceptions.ApiException(status=status, reason=reason)
    if message is not None:
        e.body = json.dumps({"kind": "Status", "apiVersion": "v1", "message": message})
    return e


@pytest.mark.parametrize(
    ("status", "reason", "message", "kind", "text"),
    [
        (503, "Service Unavailable",
         "the cloud is unreachable and the hub does not cache for component 'x' (list pods)",
         kubeapi.Unavailable,
         "list pods: HTTP 503 Service Unavailable: the cloud is unreachable and the hub does "
         "not cache for component 'x' (list pods)"),
        (503, "Service Unavailable", None, kubeapi.Unavailable,
         "list pods: HTTP 503 Service Unavailable"),
        (429, "Too Many Requests", "too many requests in flight", kubeapi.Unavailable,
         "list pods: HTTP 429 Too Many Requests: too many requests in flight"),
        (404, "Not Found", "pods not found", kubeapi.NotFound, "list pods: HTTP 404 Not Found"),
    ],
)  # fmt: skip
def test_refusals_keep_their_explanation(
    status: int, reason: str, message: str | None, kind: type[Exception], text: str
) -> None:
    error = kubeapi._error(_refusal(status, reason, message), "list pods")
    assert type(error) is kind
    assert str(error) == text
