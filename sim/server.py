"""HTTP face of the simulated vLLM replica: an OpenAI-compatible Starlette app.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (both with
``stream: true``), ``POST /v1/embeddings`` (:mod:`sim.embeddings`),
``GET /v1/models``, ``GET /health``, ``GET /metrics`` and the runtime
fault control ``GET``/``PUT /sim/faults``. For tests, benchmarks and demos only.

The generation endpoints live in :mod:`sim.generation`, the app's state in
:mod:`sim.state`. Response bodies are built by :mod:`sim.responses`; SSE streaming
and client-disconnect handling live in :mod:`sim.sse`.
"""

from __future__ import annotations

import random

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sim.config import SimConfig
from sim.embeddings import EmbeddingHandlers
from sim.generation import GenerationHandlers
from sim.labels import Labels
from sim.loop import SimEngine
from sim.metrics import METRICS_CONTENT_TYPE, SimMetrics
from sim.responses import json_response
from sim.state import FaultSettings, SimHandlers, SimState

__all__ = ["OWNED_BY", "FaultSettings", "ServiceHandlers", "SimState", "create_sim_app"]

OWNED_BY = "deja-sim (simulated)"
"""``owned_by`` of the served model in ``GET /v1/models``."""


class ServiceHandlers(SimHandlers):
    """Route handlers of the model list, health, metrics and fault-control endpoints."""

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the one served model."""
        config = self.config
        card = {
            "id": config.model,
            "object": "model",
            "created": self.state.created,
            "owned_by": OWNED_BY,
            "root": config.model,
            "parent": None,
            "max_model_len": config.max_model_len,
        }
        return json_response({"object": "list", "data": [card]}, 200, self.replica_header)

    async def health(self, request: Request) -> Response:
        """``GET /health``."""
        body = {"status": "ok", "simulated": True, "replica": self.config.replica_name}
        return json_response(body, 200, self.replica_header)

    async def metrics_endpoint(self, request: Request) -> Response:
        """``GET /metrics``: Prometheus exposition under vLLM's metric names."""
        self.metrics.sync_preemptions()
        return Response(
            self.metrics.render(), 200, headers=self.replica_header, media_type=METRICS_CONTENT_TYPE
        )

    async def sim_faults(self, request: Request) -> Response:
        """``GET``/``PUT /sim/faults``: read or partially update the injected faults."""
        state = self.state
        if request.method == "PUT":
            try:
                update = orjson.loads(await request.body())
            except orjson.JSONDecodeError as exc:
                return self.error(400, f"Invalid JSON body: {exc}")
            if not isinstance(update, dict):
                return self.error(400, "The request body must be a JSON object.")
            try:
                state.faults = FaultSettings.model_validate({**state.faults.model_dump(), **update})
            except ValidationError as exc:
                return self.error(400, f"Invalid fault settings: {exc}")
            publisher = self.engine.publisher
            if publisher is not None:
                publisher.drop, publisher.paused = (
                    state.faults.kv_events_drop,
                    state.faults.kv_events_paused,
                )
                state.faults.kv_events_drop = 0  # consumed by the publisher
        return json_response(state.faults.model_dump(), 200, self.replica_header)

    async def reset_prefix_cache(self, request: Request) -> Response:
        """``POST /reset_prefix_cache`` (vLLM's): drop every cached block (AllBlocksCleared);
        409 while sequences hold blocks."""
        if not self.engine.reset_prefix_cache():
            return self.error(409, "Cannot reset the prefix cache while requests run.")
        return Response(status_code=200, headers=self.replica_header)


def create_sim_app(config: SimConfig) -> Starlette:
    """Build the Starlette app of one simulated vLLM replica configured by ``config``.

    The app's state is reachable as ``app.state.sim`` (a :class:`SimState`).
    """
    engine = SimEngine(config)
    state = SimState(
        config=config,
        engine=engine,
        metrics=SimMetrics(engine),
        faults=FaultSettings(
            error_rate=config.error_rate,
            error_status=config.error_status,
            added_latency_ms=config.added_latency_ms,
            stall_ms=config.stall_ms,
        ),
        rng=random.Random(config.seed),
        labels=Labels.load(config.judge_labels, accuracy=config.judge_accuracy, seed=config.seed)
        if config.judge_labels
        else None,
    )
    gen = GenerationHandlers(state)
    svc = ServiceHandlers(state)
    routes = [
        Route("/v1/chat/completions", gen.chat_completions, methods=["POST"]),
        Route("/v1/completions", gen.completions, methods=["POST"]),
        Route("/v1/embeddings", EmbeddingHandlers(state).embeddings, methods=["POST"]),
        Route("/v1/models", svc.models, methods=["GET"]),
        Route("/health", svc.health, methods=["GET"]),
        Route("/metrics", svc.metrics_endpoint, methods=["GET"]),
        Route("/sim/faults", svc.sim_faults, methods=["GET", "PUT"]),
        Route("/reset_prefix_cache", svc.reset_prefix_cache, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.sim = state
    return app
