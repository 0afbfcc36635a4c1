"""Liveness and readiness."""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.json import json_response
from app.gateway import gateway_of


async def healthz(request: Request) -> Response:
    """The process is alive and its event loop answers; ``worker`` is its pid (which of
    ``--workers N`` answered)."""
    return json_response({"status": "ok", "worker": os.getpid()})


async def readyz(request: Request) -> Response:
    """Ready when the health monitor's last probe found a replica up (no probing per call: the
    monitor already probes every interval) and the exact store answers."""
    gateway = gateway_of(request)
    replicas = {r.name: r.healthy for r in gateway.pool.replicas}
    checks: dict[str, object] = {"replicas": replicas}
    ready = any(replicas.values())
    if gateway.exact is not None:  # the in-process store always answers; Redis may not
        store_ok = await gateway.exact.ping()
        checks[gateway.exact.name] = store_ok
        ready = ready and store_ok
    checks["status"] = "ready" if ready else "not ready"
    return json_response(checks, status_code=200 if ready else 503)


async def metrics(request: Request) -> Response:
    """Prometheus text exposition of this process's ``deja_*`` metrics."""
    registry = gateway_of(request).metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


routes = [
    Route("/metrics", metrics, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]
