"""``POST /v1/embeddings``: authentication, the tenant's rate limit, the bounded body read and
the model check exactly as for the generation routes (:class:`middleware.admit.AdmitStep`), then the
embeddings path (:mod:`middleware.embeddings`)."""

from __future__ import annotations

import dataclasses
import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.gateway import gateway_of
from deja.errors import DejaError
from middleware.admit import disconnect_waiter, header_map, read_body, request_id
from middleware.embeddings import EMBEDDINGS_PATH, ENDPOINT, parse_embeddings
from middleware.memo import NAMESPACE_HEADER
from middleware.policy import parse_policy

__all__ = ["embeddings", "fast_routes", "routes"]


async def embeddings(request: Request) -> Response:
    gateway = gateway_of(request)
    settings = gateway.settings
    arrived = time.monotonic()
    headers = header_map(request)
    rid = request_id(headers.get("x-request-id"))
    tenant_name = "-"
    try:
        caller = gateway.keys.authenticate(headers.get("authorization"))
        tenant = caller.tenant
        tenant_name = tenant.name  # known before the rate limit, so a 429 is logged under it
        await gateway.admit_step.take_rate_limit(caller)
        raw = await read_body(request, headers, settings.max_body_bytes)
        policy = parse_policy(
            headers,
            default_ttl=tenant.ttl_seconds or settings.cache_ttl_seconds,
            max_ttl=settings.cache_max_ttl_seconds,
        )
        req = parse_embeddings(
            raw,
            tenant=tenant.name,
            policy=policy,
            namespace=headers.get(NAMESPACE_HEADER, ""),
            cache=tenant.cache is not False,
        )
        await gateway.admit_step.check_model(req.model)
    except DejaError as exc:
        gateway.pipeline.record_step.rejected(
            exc,
            route=ENDPOINT,
            tenant=tenant_name,
            request_id=rid,
            seconds=time.monotonic() - arrived,
        )
        raise
    req = dataclasses.replace(
        req, request_id=rid, deadline=arrived + settings.request_timeout_seconds
    )
    return await gateway.embeddings.handle(req, disconnect_waiter(request.receive))


#: Served by ``middleware.asgi.DejaApp`` ahead of FastAPI, like the generation routes.
fast_routes = {EMBEDDINGS_PATH: embeddings}
routes = [Route(EMBEDDINGS_PATH, embeddings, methods=["POST"])]
