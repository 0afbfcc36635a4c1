"""Liveness and readiness."""

from __future__ import annotations

import hmac
import os
import time

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.admin import shows_admin_key
from app.api.json import json_response
from app.gateway import gateway_of
from deja.errors import AuthenticationError
from deja.tenancy.keyring import bearer_token


async def healthz(request: Request) -> Response:
    """The process is alive and its event loop answers; ``worker`` is its pid (which of
    ``--workers N`` answered)."""
    return json_response({"status": "ok", "worker": os.getpid()})


async def readyz(request: Request) -> Response:
    """ "Send me traffic": ready while some replica can take a request now — its last
    ``/health`` probe answered (the monitor probes every interval; nothing is probed per call)
    and its breaker is not open in its cooldown. Each replica's breaker is reported beside its
    probe, so a replica that answers ``/health`` but fails requests shows as such.

    A store outage is reported in the body and does not make the gateway unready: without
    Redis requests are still answered (``X-Deja-Cache: off``), and below the data disk's
    reserve (``disk``) they are answered but not stored. Taking every pod out of the Service
    for a cache outage would turn it into a full outage (issue 19).

    Replica addresses are internal: without the admin key the body says only how many replicas
    there are and how many can take a request."""
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
    available = sum(1 for state in replicas.values() if state["available"])
    checks: dict[str, object] = {"replicas": {"total": len(replicas), "available": available}}
    if shows_admin_key(gateway, request.headers.get("authorization")):
        checks["replicas"] = replicas
    ready = available > 0
    if gateway.exact is not None:  # the in-process store always answers; Redis may not
        checks["exact"] = {"store": gateway.exact.name, "ok": await gateway.exact.ping()}
    if gateway.space is not None:
        checks["disk"] = gateway.space.status()
    checks["waiting"] = gateway.upstream.admission.waiting
    checks["status"] = "ready" if ready else "not ready"
    return json_response(checks, status_code=200 if ready else 503)


async def metrics(request: Request) -> Response:
    """Prometheus text exposition of this process's ``deja_*`` metrics; with
    ``DEJA_METRICS_KEY`` set, only for that bearer key (or the admin key)."""
    gateway = gateway_of(request)
    required = gateway.settings.metrics_key
    if required is not None and required.get_secret_value():
        sent = request.headers.get("authorization")
        token = bearer_token(sent or "")
        ok = bool(token) and hmac.compare_digest(
            token.encode(), required.get_secret_value().encode()
        )
        if not (ok or shows_admin_key(gateway, sent)):
            raise AuthenticationError("a valid metrics bearer key is required for /metrics")
    registry = gateway.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


routes = [
    Route("/metrics", metrics, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]
