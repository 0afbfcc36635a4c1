"""Generation endpoints of the simulated replica: ``POST /v1/chat/completions`` and
``POST /v1/completions`` (both with ``stream: true``).

:func:`parse_job` validates a request body into a :class:`~sim.responses.Job`;
:class:`GenerationHandlers` injects faults, holds engine slots, answers (blocking or SSE) and
records metrics. A semantic-cache judge request is answered by :mod:`sim.judge`'s rule, or with
``judge_labels`` by :mod:`sim.labels`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from sim.engine import (
    Generation,
    PromptError,
    RenderedPrompt,
    generate,
    render_chat,
    render_completion_prompts,
    tokenize,
)
from sim.judge import judge_generation
from sim.labels import Labels
from sim.loop import Ticket
from sim.responses import (
    Job,
    Kind,
    completion_body,
    json_response,
    response_head,
    stream_chunk,
    usage_chunk,
)
from sim.scheduler import Seq
from sim.sse import SSEResponse, SSEWriter, race_disconnect
from sim.state import SimHandlers

__all__ = ["BadRequest", "GenerationHandlers", "parse_job"]

_MAX_N = 128


class BadRequest(Exception):
    """A generation request that fails validation (answered with HTTP 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


async def _maybe_sleep(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)


# -------------------------------------------------------------------- request parsing


def _int_param(payload: Mapping[str, Any], name: str, minimum: int) -> int | None:
    value = payload.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"'{name}' must be an integer >= {minimum}", name)
    return value


def _chat_prompt(messages: Any, encode: Callable[[str], list[int]]) -> RenderedPrompt:
    text = render_chat(messages)
    return RenderedPrompt(text=text, token_ids=encode(text))


def _prompts_and_max_tokens(
    payload: Mapping[str, Any], kind: Kind, encode: Callable[[str], list[int]]
) -> tuple[list[RenderedPrompt], int | None]:
    if kind == "chat":
        try:
            prompts = [_chat_prompt(payload.get("messages"), encode)]
        except PromptError as exc:
            raise BadRequest(str(exc), "messages") from exc
        max_tokens = _int_param(payload, "max_completion_tokens", 1)
        if max_tokens is None:
            max_tokens = _int_param(payload, "max_tokens", 1)
    else:
        try:
            prompts = render_completion_prompts(payload.get("prompt"), encode)
        except PromptError as exc:
            raise BadRequest(str(exc), "prompt") from exc
        max_tokens = _int_param(payload, "max_tokens", 1)
    return prompts, max_tokens


def _generation(
    prompt: RenderedPrompt,
    max_tokens: int | None,
    max_model_len: int,
    ignore_eos: bool,
    seed: str | None = None,
) -> Generation:
    length = len(prompt.token_ids)
    room = max_model_len - length
    if room < 1 or (max_tokens is not None and max_tokens > room):
        requested = length + (max_tokens or 0)
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. "
            f"However, you requested {requested} tokens ({length} in the messages, "
            f"{max_tokens or 0} in the completion). Please reduce the length of the "
            "messages or completion.",
            "max_tokens" if room >= 1 else "messages",
        )
    limit = room if max_tokens is None else max_tokens
    return generate(prompt.text if seed is None else seed, limit, ignore_eos=ignore_eos)


def _labelled_seed(messages: Any, labels: Labels | None) -> str | None:
    """With ``labels``, the answer seed of a chat whose last message is a labelled question."""
    if labels is None or not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, Mapping) or last.get("role") != "user":
        return None
    content = last.get("content")
    return labels.answer_seed(content) if isinstance(content, str) else None


def parse_job(
    payload: Mapping[str, Any],
    kind: Kind,
    max_model_len: int,
    encode: Callable[[str], list[int]] = tokenize,
    labels: Labels | None = None,
) -> Job:
    """Validate a generation request body into a :class:`Job`; raise :class:`BadRequest`.

    ``encode`` is the replica's tokenizer. ``cache_salt`` (vLLM's extra field) must be a
    non-empty string: it goes into the first block's hash, so only requests with the same salt
    share cached blocks. With ``labels`` (``judge_labels``), judge requests and labelled
    questions are answered by :mod:`sim.labels`."""
    salt = payload.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise BadRequest("'cache_salt' must be a non-empty string", "cache_salt")
    prompts, max_tokens = _prompts_and_max_tokens(payload, kind, encode)
    n = _int_param(payload, "n", 1) or 1
    if n > _MAX_N:
        raise BadRequest(f"'n' must be <= {_MAX_N}", "n")
    stream = payload.get("stream") is True
    options = payload.get("stream_options")
    include_usage = stream and isinstance(options, Mapping) and options.get("include_usage") is True
    generations: list[Generation] = []
    messages = payload.get("messages")
    judged = judge_generation(messages, max_tokens, labels) if kind == "chat" else None
    seed = _labelled_seed(messages, labels) if kind == "chat" else None
    ignore_eos = payload.get("ignore_eos") is True
    for prompt in prompts:
        generation = _generation(prompt, max_tokens, max_model_len, ignore_eos, seed)  # length
        generations.extend([judged or generation] * n)
    return Job(kind, prompts, generations, n, stream, include_usage, cache_salt=salt)


# -------------------------------------------------------------------- handlers


class GenerationHandlers(SimHandlers):
    """Route handlers of the two generation endpoints of one simulator app."""

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        return await self.guarded(request, "chat")

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``."""
        return await self.guarded(request, "completion")

    async def guarded(self, request: Request, kind: Kind) -> Response:
        """Answer a generation request, or 499 once the client disconnects."""
        body = await request.body()
        finished, response = await race_disconnect(request.receive, self.generation(body, kind))
        if finished:
            assert isinstance(response, Response)
            return response
        return Response(status_code=499, headers=self.replica_header)  # client is gone

    async def generation(self, body: bytes, kind: Kind) -> Response:
        """Inject faults, validate ``body``, query the prefix cache and answer."""
        faults = self.state.faults
        await _maybe_sleep(faults.added_latency_ms / 1000.0)
        if faults.error_rate > 0 and self.state.rng.random() < faults.error_rate:
            return self.fault_response()
        await _maybe_sleep(faults.stall_ms / 1000.0)
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return self.error(400, f"Invalid JSON body: {exc}")
        if not isinstance(payload, dict):
            return self.error(400, "The request body must be a JSON object.")
        model = payload.get("model")
        if model is not None and model != self.config.model:
            return self.error(
                404,
                f"The model `{model}` does not exist.",
                param="model",
                code="model_not_found",
            )
        try:
            job = parse_job(
                payload, kind, self.config.max_model_len, self.engine.tokenize, self.state.labels
            )
        except BadRequest as exc:
            return self.error(400, exc.message, param=exc.param)
        for prompt in job.prompts:
            tokens = prompt.token_ids
            hashes = self.engine.prompt_hashes(tokens, job.cache_salt)
            job.prompt_hashes.append(hashes)
            cached = self.engine.lookup_prefix(hashes, len(tokens))
            job.prompt_tokens += len(tokens)
            job.cached_tokens += cached
            job.prompt_cached.append(cached)
            self.metrics.record_prompt(len(tokens), cached)
        headers = {**self.replica_header, "X-Sim-Cached-Tokens": str(job.cached_tokens)}
        arrival = time.perf_counter()
        if job.stream:
            return self.streaming(job, arrival, headers)
        return await self.run_blocking(job, arrival, headers)

    def fault_response(self) -> Response:
        """The error response of an injected fault."""
        faults = self.state.faults
        status = faults.error_status
        type_ = "server_error" if status >= 500 else "invalid_request_error"
        if status == 429:
            type_ = "rate_limit_error"
        return self.error(
            status,
            f"Simulated fault injected by the deja simulator (replica "
            f"{self.config.replica_name}, error_rate={faults.error_rate}).",
            type_,
            code="simulated_fault",
        )

    @contextlib.asynccontextmanager
    async def engine_run(self, job: Job) -> AsyncIterator[Ticket]:
        """Submit one sequence per choice to the engine; abort the unfinished ones on exit."""
        seqs = [
            Seq(
                prompt_len=len(prompt.token_ids),
                max_output=gen.num_tokens,
                cached=cached,
                hashes=job.prompt_hashes[i] if i < len(job.prompt_hashes) else None,
                token_ids=prompt.token_ids,
            )
            for i, (prompt, cached, gens) in enumerate(job.by_prompt())
            for gen in gens
        ]
        ticket = self.engine.submit(seqs)
        try:
            yield ticket
        finally:
            if not ticket.done:
                self.engine.abort(ticket)

    def record_finish(self, job: Job, arrival: float) -> None:
        """Observe the request latency and count the finished sequences of ``job``."""
        self.metrics.e2e_request_latency.observe(time.perf_counter() - arrival)
        for gen in job.generations:
            self.metrics.record_success(gen.finish_reason)

    async def run_blocking(self, job: Job, arrival: float, headers: dict[str, str]) -> Response:
        """Run ``job``'s sequences through the engine, then answer with one JSON body."""
        async with self.engine_run(job) as ticket:
            await ticket.wait_done()
            job.cut_to([seq.output for seq in ticket.seqs])
        self.record_finish(job, arrival)
        return json_response(completion_body(job, self.config.model), 200, headers)

    def streaming(self, job: Job, arrival: float, headers: dict[str, str]) -> Response:
        """An SSE response streaming ``job``'s tokens as the engine's steps produce them."""
        head = response_head(job.kind, self.config.model, chunk=True)
        chat = job.kind == "chat"

        def chunk(index: int, piece: str | None, finish: str | None) -> dict[str, Any]:
            return stream_chunk(head, chat, index, piece, finish)

        async def produce(writer: SSEWriter) -> None:
            async with self.engine_run(job) as ticket:
                await writer.flush()
                if chat:
                    for index in range(len(job.generations)):
                        writer.event(chunk(index, None, None))
                sent = [0] * len(ticket.seqs)
                while True:
                    done = ticket.done
                    pairs = zip(ticket.seqs, job.generations, strict=True)
                    for index, (seq, gen) in enumerate(pairs):
                        for piece in gen.pieces[sent[index] : seq.output]:
                            writer.event(chunk(index, piece, None))
                        sent[index] = max(sent[index], seq.output)
                    if done:
                        break
                    await writer.flush()
                    await ticket.wait()
                job.cut_to(sent)
                for index, gen in enumerate(job.generations):
                    writer.event(chunk(index, None, gen.finish_reason))
            self.record_finish(job, arrival)
            if job.include_usage:
                writer.event(usage_chunk(head, job))
            writer.done()

        return SSEResponse(produce, {**headers, "Cache-Control": "no-cache"})
