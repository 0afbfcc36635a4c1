"""HTTP face of the simulated vLLM replica: an OpenAI-compatible Starlette app.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (both with
``stream: true``), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` and the runtime
fault control ``GET``/``PUT /sim/faults``. For tests, benchmarks and demos only.

Response bodies are built by :mod:`deja.sim.responses`; SSE streaming and client-disconnect
handling live in :mod:`deja.sim.sse`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from deja.sim.config import SimConfig
from deja.sim.engine import (
    Generation,
    PromptError,
    RenderedPrompt,
    SimEngine,
    generate,
    render_chat,
    render_completion_prompts,
    tokenize,
)
from deja.sim.metrics import METRICS_CONTENT_TYPE, SimMetrics
from deja.sim.responses import (
    Job,
    Kind,
    completion_body,
    error_body,
    json_response,
    response_head,
    stream_chunk,
    usage_chunk,
)
from deja.sim.sse import SSEResponse, SSEWriter, race_disconnect

__all__ = ["OWNED_BY", "FaultSettings", "SimState", "create_sim_app"]

OWNED_BY = "deja-sim (simulated)"
"""``owned_by`` of the served model in ``GET /v1/models``."""

_MAX_N = 128


class FaultSettings(BaseModel):
    """Faults a running replica injects; changed at runtime through ``PUT /sim/faults``."""

    model_config = ConfigDict(extra="forbid")

    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    error_status: int = Field(default=500, ge=400, le=599)
    added_latency_ms: float = Field(default=0.0, ge=0.0)
    stall_ms: float = Field(default=0.0, ge=0.0)


@dataclass
class SimState:
    """Everything one simulator app holds (reachable as ``app.state.sim``)."""

    config: SimConfig
    engine: SimEngine
    metrics: SimMetrics
    faults: FaultSettings
    rng: random.Random
    created: int = field(default_factory=lambda: int(time.time()))
    slots: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.slots = asyncio.Semaphore(self.config.max_num_seqs)


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


async def _maybe_sleep(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)


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
    )
    metrics = state.metrics
    replica_header = {"X-Sim-Replica": config.replica_name}

    def error(
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | int | None = None,
    ) -> Response:
        return json_response(error_body(message, type_, param, code), status, replica_header)

    # ---------------------------------------------------------------- request parsing

    def int_param(payload: Mapping[str, Any], name: str, minimum: int) -> int | None:
        value = payload.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise _BadRequest(f"'{name}' must be an integer >= {minimum}", name)
        return value

    def parse_job(payload: Mapping[str, Any], kind: Kind) -> Job:
        if kind == "chat":
            try:
                prompts = [chat_prompt(payload.get("messages"))]
            except PromptError as exc:
                raise _BadRequest(str(exc), "messages") from exc
            max_tokens = int_param(payload, "max_completion_tokens", 1)
            if max_tokens is None:
                max_tokens = int_param(payload, "max_tokens", 1)
        else:
            try:
                prompts = render_completion_prompts(payload.get("prompt"))
            except PromptError as exc:
                raise _BadRequest(str(exc), "prompt") from exc
            max_tokens = int_param(payload, "max_tokens", 1)
        n = int_param(payload, "n", 1) or 1
        if n > _MAX_N:
            raise _BadRequest(f"'n' must be <= {_MAX_N}", "n")
        stream = payload.get("stream") is True
        options = payload.get("stream_options")
        include_usage = (
            stream and isinstance(options, Mapping) and options.get("include_usage") is True
        )
        generations: list[Generation] = []
        for prompt in prompts:
            length = len(prompt.token_ids)
            room = config.max_model_len - length
            if room < 1 or (max_tokens is not None and max_tokens > room):
                requested = length + (max_tokens or 0)
                raise _BadRequest(
                    f"This model's maximum context length is {config.max_model_len} tokens. "
                    f"However, you requested {requested} tokens ({length} in the messages, "
                    f"{max_tokens or 0} in the completion). Please reduce the length of the "
                    "messages or completion.",
                    "max_tokens" if room >= 1 else "messages",
                )
            gen = generate(prompt.text, room if max_tokens is None else max_tokens)
            generations.extend([gen] * n)
        return Job(kind, prompts, generations, n, stream, include_usage)

    def chat_prompt(messages: Any) -> RenderedPrompt:
        text = render_chat(messages)
        return RenderedPrompt(text=text, token_ids=tokenize(text))

    # ---------------------------------------------------------------- engine slots

    @contextlib.asynccontextmanager
    async def slot(total_tokens: int) -> AsyncIterator[None]:
        engine.waiting += 1
        try:
            await state.slots.acquire()
        finally:
            engine.waiting -= 1
        engine.running += 1
        blocks = engine.hold_blocks(total_tokens)
        metrics.sync_preemptions()
        try:
            yield
        finally:
            engine.running -= 1
            engine.release_blocks(blocks)
            state.slots.release()

    def record_finish(job: Job, arrival: float, first: float | None) -> None:
        end = time.perf_counter()
        steps = max((g.num_tokens for g in job.generations), default=0)
        if first is not None and steps > 1:
            metrics.time_per_output_token.observe((end - first) / (steps - 1))
        metrics.e2e_request_latency.observe(end - arrival)
        for gen in job.generations:
            metrics.record_success(gen.finish_reason)

    # ---------------------------------------------------------------- responses

    async def run_blocking(job: Job, arrival: float, headers: dict[str, str]) -> Response:
        steps = max((g.num_tokens for g in job.generations), default=0)
        total_tokens = job.prompt_tokens + job.completion_tokens
        first: float | None = None
        async with slot(total_tokens):
            await _maybe_sleep(engine.ttft_seconds(job.prompt_tokens - job.cached_tokens))
            if steps:
                first = time.perf_counter()
                metrics.time_to_first_token.observe(first - arrival)
            await _maybe_sleep(engine.decode_seconds_per_token() * max(steps - 1, 0))
            metrics.generation_tokens.inc(job.completion_tokens)
        record_finish(job, arrival, first)
        return json_response(completion_body(job, config.model), 200, headers)

    def streaming(job: Job, arrival: float, headers: dict[str, str]) -> Response:
        head = response_head(job.kind, config.model, chunk=True)
        chat = job.kind == "chat"

        def chunk(index: int, piece: str | None, finish: str | None) -> dict[str, Any]:
            return stream_chunk(head, chat, index, piece, finish)

        async def produce(writer: SSEWriter) -> None:
            steps = max((g.num_tokens for g in job.generations), default=0)
            total_tokens = job.prompt_tokens + job.completion_tokens
            decode = engine.decode_seconds_per_token()
            first: float | None = None
            async with slot(total_tokens):
                delay = engine.ttft_seconds(job.prompt_tokens - job.cached_tokens)
                if delay > 0:
                    await writer.flush()
                    await asyncio.sleep(delay)
                if chat:
                    for index in range(len(job.generations)):
                        writer.event(chunk(index, None, None))
                for step in range(steps):
                    if step and decode > 0:
                        await writer.flush()
                        await asyncio.sleep(decode)
                    emitted = 0
                    for index, gen in enumerate(job.generations):
                        if step < gen.num_tokens:
                            writer.event(chunk(index, gen.pieces[step], None))
                            emitted += 1
                    metrics.generation_tokens.inc(emitted)
                    if step == 0:
                        first = time.perf_counter()
                        metrics.time_to_first_token.observe(first - arrival)
                for index, gen in enumerate(job.generations):
                    writer.event(chunk(index, None, gen.finish_reason))
            record_finish(job, arrival, first)
            if job.include_usage:
                writer.event(usage_chunk(head, job))
            writer.done()

        return SSEResponse(produce, {**headers, "Cache-Control": "no-cache"})

    # ---------------------------------------------------------------- generation flow

    async def generation(body: bytes, kind: Kind) -> Response:
        faults = state.faults
        await _maybe_sleep(faults.added_latency_ms / 1000.0)
        if faults.error_rate > 0 and state.rng.random() < faults.error_rate:
            status = faults.error_status
            type_ = "server_error" if status >= 500 else "invalid_request_error"
            if status == 429:
                type_ = "rate_limit_error"
            return error(
                status,
                f"Simulated fault injected by the deja simulator (replica "
                f"{config.replica_name}, error_rate={faults.error_rate}).",
                type_,
                code="simulated_fault",
            )
        await _maybe_sleep(faults.stall_ms / 1000.0)
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return error(400, f"Invalid JSON body: {exc}")
        if not isinstance(payload, dict):
            return error(400, "The request body must be a JSON object.")
        model = payload.get("model")
        if model is not None and model != config.model:
            return error(
                404,
                f"The model `{model}` does not exist.",
                param="model",
                code="model_not_found",
            )
        try:
            job = parse_job(payload, kind)
        except _BadRequest as exc:
            return error(400, exc.message, param=exc.param)
        for prompt in job.prompts:
            tokens = prompt.token_ids
            cached = engine.cache.lookup_and_insert(tokens)
            job.prompt_tokens += len(tokens)
            job.cached_tokens += cached
            metrics.record_prompt(len(tokens), cached)
        headers = {**replica_header, "X-Sim-Cached-Tokens": str(job.cached_tokens)}
        arrival = time.perf_counter()
        if job.stream:
            return streaming(job, arrival, headers)
        return await run_blocking(job, arrival, headers)

    async def guarded(request: Request, kind: Kind) -> Response:
        body = await request.body()
        finished, response = await race_disconnect(request.receive, generation(body, kind))
        if finished:
            assert isinstance(response, Response)
            return response
        return Response(status_code=499, headers=replica_header)  # client is gone

    async def chat_completions(request: Request) -> Response:
        return await guarded(request, "chat")

    async def completions(request: Request) -> Response:
        return await guarded(request, "completion")

    # ---------------------------------------------------------------- other endpoints

    async def models(request: Request) -> Response:
        card = {
            "id": config.model,
            "object": "model",
            "created": state.created,
            "owned_by": OWNED_BY,
            "root": config.model,
            "parent": None,
            "max_model_len": config.max_model_len,
        }
        return json_response({"object": "list", "data": [card]}, 200, replica_header)

    async def health(request: Request) -> Response:
        body = {"status": "ok", "simulated": True, "replica": config.replica_name}
        return json_response(body, 200, replica_header)

    async def metrics_endpoint(request: Request) -> Response:
        metrics.sync_preemptions()
        return Response(
            metrics.render(), 200, headers=replica_header, media_type=METRICS_CONTENT_TYPE
        )

    async def sim_faults(request: Request) -> Response:
        if request.method == "PUT":
            try:
                update = orjson.loads(await request.body())
            except orjson.JSONDecodeError as exc:
                return error(400, f"Invalid JSON body: {exc}")
            if not isinstance(update, dict):
                return error(400, "The request body must be a JSON object.")
            try:
                state.faults = FaultSettings.model_validate({**state.faults.model_dump(), **update})
            except ValidationError as exc:
                return error(400, f"Invalid fault settings: {exc}")
        return json_response(state.faults.model_dump(), 200, replica_header)

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/sim/faults", sim_faults, methods=["GET", "PUT"]),
    ]
    app = Starlette(routes=routes)
    app.state.sim = state
    return app
