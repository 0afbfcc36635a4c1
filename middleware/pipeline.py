"""The request path, top to bottom, as docs/architecture.md draws it.

``Pipeline.handle`` calls each step once and each step returns a value; nothing calls back up:

- ``LookupStep.lookup`` (steps 1-4: policy, bypass, exact, semantic) → a ``Lookup``;
- a hit: ``replay`` (JSON or SSE, whichever the request asks for);
- a miss: ``FlightStep.reply`` (identical storable misses share one call) or
  ``ProduceStep.direct`` (steps 5-8: retrieve, route, the replica, the store) → a ``Reply``;
- ``RecordStep.observe``, once, from the lookup and the reply (a stream's when it ends).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import aclosing

from opentelemetry.trace import Span
from starlette.responses import Response, StreamingResponse

from deja.errors import UpstreamError
from deja.request import GatewayRequest, Outcome
from middleware.disconnect import Disconnected
from middleware.errors import stream_error_event
from middleware.flight import FlightStep
from middleware.lookup import Lookup, LookupStep
from middleware.memo import Prepared, RequestMemo
from middleware.produce import ProduceStep, Reply
from middleware.record import Observability, RecordStep
from middleware.replay import JsonReplay, replay_sse
from middleware.responses import JSON, SSE, prebuilt, prebuilt_raw
from middleware.retrieve import sources_header
from middleware.sse import MEDIA_TYPE
from middleware.tasks import BackgroundTasks

OUTCOME_BYTES = {outcome: outcome.value.encode() for outcome in Outcome}
#: What a relayed stream's response adds to its headers: no caching, no proxy buffering.
_STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class Pipeline:
    """Runs one admitted request through the steps; owns none of their parts."""

    def __init__(
        self,
        lookup_step: LookupStep,
        produce_step: ProduceStep,
        *,
        observability: Observability | None = None,
        flight_step: FlightStep | None = None,
        background: BackgroundTasks | None = None,
        memo: RequestMemo | None = None,
    ) -> None:
        self.lookup_step = lookup_step
        self.produce_step = produce_step
        self.flight_step = flight_step
        self.obs = observability or Observability()
        self.record_step = RecordStep(self.obs)
        self.tracing = self.obs.tracing
        self.stats = self.obs.stats
        self.background = background or BackgroundTasks()
        self.replay_json = JsonReplay()
        #: Byte-identical requests → their ``Prepared`` (filled at admission).
        self.memo = memo if memo is not None else RequestMemo(0)

    async def handle(
        self, req: GatewayRequest, disconnected: Disconnected, prepared: Prepared | None = None
    ) -> Response:
        """Answer ``req``; ``prepared`` is what ``LookupStep.prepare`` derived from it
        (memoised at admission for byte-identical requests), computed here when not given."""
        started = time.perf_counter()
        record = self.record_step
        with self.tracing.request_span("deja.request") as span:
            lookup = await self.lookup_step.lookup(req, prepared or self.lookup_step.prepare(req))
            self.stats.record(req.tenant, lookup.outcome)
            if lookup.answer is not None:
                response = self.replay(req, lookup)
                record.observe(req, lookup, started, span=span)
                return response
            try:
                reply = await self.miss(req, lookup, disconnected)
            except BaseException as exc:  # recorded with its status, then mapped by the caller
                record.observe(req, lookup, started, error=exc, span=span)
                raise
            if reply.stream is None:
                replica = reply.replica
                record.observe(
                    req, reply.lookup, started, replica=replica, produced=reply.produced, span=span
                )
                return prebuilt(reply.body, reply.media_type, reply.headers)
            record.stream_started(span, req, reply.lookup, reply.replica)
        headers = {**reply.headers, **_STREAM_HEADERS}
        body = self.streamed(req, reply, started, span)
        return StreamingResponse(body, media_type=MEDIA_TYPE, headers=headers)

    async def miss(self, req: GatewayRequest, lookup: Lookup, disconnected: Disconnected) -> Reply:
        """Steps 5-8: shared with identical concurrent misses when the answer may be stored."""
        if self.flight_step is not None and lookup.storable:
            return await self.flight_step.reply(req, lookup, disconnected)
        return await self.produce_step.direct(req, lookup, disconnected)

    async def streamed(
        self, req: GatewayRequest, reply: Reply, started: float, span: Span | None
    ) -> AsyncGenerator[bytes, None]:
        """A streamed reply's body; a replica failing midway ends it with an error event. The
        request is recorded when the stream ends, however it ends."""
        assert reply.stream is not None
        try:
            async with aclosing(reply.stream) as stream:
                async for chunk in stream:
                    yield chunk
        except UpstreamError as exc:
            yield stream_error_event(exc, req.request_id)
        finally:
            self.record_step.observe(
                req, reply.lookup, started, replica=reply.replica, produced=reply.record()
            )

    def replay(self, req: GatewayRequest, lookup: Lookup) -> Response:
        """A hit, in the shape the client asked for (JSON or SSE)."""
        answer = lookup.answer
        exact = self.lookup_step.exact
        assert answer is not None and exact is not None
        exact.note_hit(answer.entry_id)
        tokens = (answer.usage or {}).get("completion_tokens")
        if isinstance(tokens, int):
            upstream = self.produce_step.upstream
            self.obs.metrics.served_from_cache(tokens, upstream.pool.seconds_per_token())
        headers = [
            (b"x-deja-cache", OUTCOME_BYTES[lookup.outcome]),
            (b"x-deja-entry", answer.entry_id.encode()),
            (b"age", b"%d" % answer.age(time.time())),
            (b"x-request-id", req.request_id.encode("latin-1")),
        ]
        if lookup.similarity is not None:
            headers.append((b"x-deja-similarity", b"%.4f" % lookup.similarity))
        if lookup.verifier_score is not None:
            headers.append((b"x-deja-verifier-score", b"%.4f" % lookup.verifier_score))
        if answer.sources is not None:
            headers.append((b"x-deja-sources", sources_header(answer.sources).encode("latin-1")))
        if answer.alias_of is not None:
            headers.append((b"x-deja-alias-of", answer.alias_of.encode()))
        if req.stream:
            body = replay_sse(answer, model=req.model, include_usage=req.include_usage)
            return prebuilt_raw(body, SSE, headers)
        return prebuilt_raw(self.replay_json(answer, model=req.model), JSON, headers)

    async def drain(self) -> None:
        """Wait for pending stores (used at shutdown and by tests)."""
        await self.background.drain()
