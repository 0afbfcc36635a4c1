"""The OpenAI-compatible routes. Plain Starlette handlers: the hot path skips FastAPI's
parameter machinery, and the body is read once, bounded by ``max_body_bytes``."""

from __future__ import annotations

import itertools
import secrets
import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive

from app.api.json import json_response
from app.api.validation import validate
from app.gateway import Gateway, gateway_of
from deja.cache.keys import Endpoint
from deja.errors import (
    BodyTooLargeError,
    ClientGoneError,
    DejaError,
    ModelNotFoundError,
    NoHealthyReplicaError,
)
from deja.request import GatewayRequest
from deja.tenancy.keyring import Tenant
from middleware.disconnect import Disconnected
from middleware.errors import http_error
from middleware.memo import (
    CONTEXT_ID_HEADER,
    CORPUS_FILTER_HEADER,
    CORPUS_HEADER,
    NAMESPACE_HEADER,
    memo_key,
)
from middleware.policy import parse_policy
from middleware.telemetry import record_rejection


def header_map(request: Request) -> dict[str, str]:
    """The request headers as a plain dict with lower-case names, built in one pass (the
    ASGI server already lower-cases names; a repeated header keeps its last value)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]}


_REQUEST_PREFIX = secrets.token_hex(4)
_REQUEST_COUNTER = itertools.count(1)


def request_id(sent: str | None) -> str:
    """The client's ``X-Request-Id`` when it is sane, else a new process-unique id."""
    if sent and len(sent) <= 128 and sent.isprintable():
        return sent
    return f"deja-{_REQUEST_PREFIX}-{next(_REQUEST_COUNTER):x}"


async def read_body(request: Request, headers: dict[str, str], limit: int) -> bytes:
    """The whole body, or 413 as soon as it is known to exceed ``limit``."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError(f"Request body of {declared} bytes exceeds the {limit}-byte limit.")
    body = b""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError("the client went away while sending its request")
        chunk: bytes = message.get("body", b"")
        body += chunk
        if len(body) > limit:
            raise BodyTooLargeError(f"Request body exceeds the {limit}-byte limit.")
        if not message.get("more_body", False):
            return body


def _disconnect_waiter(receive: Receive) -> Disconnected:
    async def wait() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return

    return wait


async def ensure_model(gateway: Gateway, model: str) -> None:
    """404 for a model no replica serves; 503 when no replica's model list could be read."""
    if await gateway.discovery.knows(model):
        return
    if not gateway.pool.known_models():
        raise NoHealthyReplicaError("no replica is reachable to serve this request")
    raise ModelNotFoundError(
        f"The model '{model}' does not exist or is not served by any replica.", param="model"
    )


async def _generate(request: Request, endpoint: Endpoint) -> Response:
    gateway = gateway_of(request)
    settings = gateway.settings
    arrived = time.monotonic()
    deadline = arrived + settings.request_timeout_seconds  # from arrival, body included
    headers = header_map(request)
    pipeline = gateway.pipeline
    tenant_name = "-"
    try:
        caller = gateway.keys.authenticate(headers.get("authorization"))
        tenant = caller.tenant
        tenant_name = tenant.name
        if tenant.rate_limit_rpm is not None:
            await gateway.limiter.take(caller.key_id, tenant.rate_limit_rpm)
        raw = await read_body(request, headers, settings.max_body_bytes)
        # Byte-identical requests (same tenant, same shaping headers) skip validation and key
        # hashing; the memo never holds an answer (middleware/memo.py).
        key = memo_key(endpoint, tenant, raw, headers)
        prepared = pipeline.memo.get(key)
        if prepared is None:
            prepared = pipeline.prepare(prepare_request(gateway, endpoint, tenant, raw, headers))
            pipeline.memo.put(key, prepared)
        req = prepared.req.for_request(request_id(headers.get("x-request-id")), deadline)
        await ensure_model(gateway, req.model)
        if req.corpus is not None:
            pipeline.check_corpus(req)
    except DejaError as exc:
        shape = http_error(exc)
        record_rejection(
            gateway.metrics,
            pipeline.obs.access_log,
            route=endpoint,
            status=shape.status,
            reason=shape.code or shape.type,
            tenant=tenant_name,
            request_id=request_id(headers.get("x-request-id")),
            seconds=time.monotonic() - arrived,
        )
        raise
    return await pipeline.handle(req, _disconnect_waiter(request.receive), prepared)


def prepare_request(
    gateway: Gateway, endpoint: Endpoint, tenant: Tenant, raw: bytes, headers: dict[str, str]
) -> GatewayRequest:
    """Parse and validate one request. Every header read here must be in
    ``middleware.memo.SHAPING_HEADERS``, or the memo would mix requests."""
    settings = gateway.settings
    policy = parse_policy(
        headers,
        default_ttl=tenant.ttl_seconds or settings.cache_ttl_seconds,
        max_ttl=settings.cache_max_ttl_seconds,
    )
    return validate(
        endpoint,
        raw,
        tenant=tenant.name,
        policy=policy,
        prefix_override=headers.get("x-prefix-hash"),
        namespace=headers.get(NAMESPACE_HEADER, ""),
        cache=tenant.cache is not False,
        tenant_threshold=tenant.threshold,
        share_prefix_cache=tenant.share_prefix_cache,
        corpus=headers.get(CORPUS_HEADER) or tenant.corpus,
        model_corpus=settings.rag_model_corpus,
        default_corpus=settings.rag_default_corpus,
        context_id=headers.get(CONTEXT_ID_HEADER),
        rag_on_failure=tenant.rag_on_failure or settings.rag_on_failure,
        corpus_filter=headers.get(CORPUS_FILTER_HEADER),
    )


async def chat_completions(request: Request) -> Response:
    return await _generate(request, "chat")


async def completions(request: Request) -> Response:
    return await _generate(request, "completion")


async def list_models(request: Request) -> Response:
    """The models the replicas serve; with ``DEJA_MODELS_REQUIRE_KEY``, only for client keys."""
    gateway = gateway_of(request)
    if gateway.settings.models_require_key:
        gateway.keys.authenticate(request.headers.get("authorization"))
    if not gateway.pool.known_models():
        await gateway.discovery.refresh()
    return json_response({"object": "list", "data": gateway.pool.model_list()})


#: The hot path: served by ``middleware.asgi.DejaApp`` ahead of FastAPI's middleware and router.
fast_routes = {
    "/v1/chat/completions": chat_completions,
    "/v1/completions": completions,
}

routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/models", list_models, methods=["GET"]),
]
