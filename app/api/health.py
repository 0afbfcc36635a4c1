"""Liveness and readiness."""

from __future__ import annotations

import os
import time

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
    """Ready when some replica can take a request now — its last ``/health`` probe answered
    (the monitor probes every interval; nothing is probed per call) and its breaker is not
    open in its cooldown — and the exact store answers. Each replica's breaker is reported
    beside its probe, so a replica that answers ``/health`` but fails requests shows as such."""
    gateway = gateway_of(request)
    now = time.monotonic()
    replicas = {
        r.name: {
            "healthy": r.healthy,
            "breaker": r.breaker.state.value,
            "available": r.healthy and not r.breaker.cooling(now),
            "in_flight": r.in_flight,
            "max_inflight": gateway.pool.limit(r),
        }
        for r in gateway.pool.replicas
    }
    checks: dict[str, object] = {"replicas": replicas}
    ready = any(state["available"] for state in replicas.values())
    if gateway.exact is not None:  # the in-process store always answers; Redis may not
        store_ok = await gateway.exact.ping()
        checks[gateway.exact.name] = store_ok
        ready = ready and store_ok
    checks["waiting"] = gateway.upstream.admission.waiting
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
