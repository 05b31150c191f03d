"""Kubernetes ``Status`` answers as aiohttp responses (the only shape a hub error takes)."""

from __future__ import annotations

from aiohttp import web

from yurthub import statuses


def status(code: int, message: str, *, reason: str | None = None) -> web.Response:
    body = statuses.encode(statuses.failure(code, message, reason=reason))
    return web.Response(status=code, body=body, content_type="application/json")


NO_HEALTHY_BACKENDS = "no healthy backends available."
