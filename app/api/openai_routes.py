"""The OpenAI-compatible routes, thin: HTTP in (``AdmitStep.admit``: key, rate limit, body,
validation, model and corpus), ``Pipeline.handle``, the response out. Plain Starlette handlers:
the hot path skips FastAPI's parameter machinery."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.api.json import json_response
from app.gateway import gateway_of
from deja.cache.keys import Endpoint


async def _generate(request: Request, endpoint: Endpoint) -> Response:
    gateway = gateway_of(request)
    admitted = await gateway.admit_step.admit(request, endpoint, gateway.keys)
    return await gateway.pipeline.handle(admitted.req, admitted.disconnected, admitted.prepared)


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
