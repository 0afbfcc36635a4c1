"""The request path, top to bottom. ``Pipeline.handle`` reads like docs/architecture.md; each
step is one method named after it: policy → bypass → exact → semantic → retrieve (RAG
requests) → route → upstream → store (off the response path).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span
from starlette.responses import Response, StreamingResponse

from deja.cache.exact.base import ExactStore
from deja.cache.flightlock import FlightLock
from deja.cache.keys import cache_key
from deja.errors import CorpusNotFoundError, DejaError, UpstreamError
from deja.observability.accesslog import AccessLog
from deja.observability.metrics import Metrics
from deja.observability.stats import Stats
from deja.observability.tracing import Tracing, set_attributes
from deja.replicas.upstream import Upstream
from deja.request import GatewayRequest, Outcome
from deja.routing.prefix import PrefixConfig, prefix_hash
from deja.temporal.rules import TemporalDetector
from middleware.answers import parse_answer, with_sources
from middleware.bypass import bypass_reason
from middleware.disconnect import Disconnected, until_disconnect
from middleware.errors import http_error, stream_error_event
from middleware.exact import exact_lookup
from middleware.headers import miss_headers
from middleware.lookup import Lookup
from middleware.memo import Prepared, RequestMemo
from middleware.relay import (
    SourcesStamp,
    UsageChunkFilter,
    answer_from_sse,
    with_usage_requested,
)
from middleware.replay import SOURCES_FIELD, JsonReplay, replay_sse
from middleware.responses import JSON as JSON_TYPE
from middleware.responses import SSE as SSE_TYPE
from middleware.responses import prebuilt, prebuilt_raw
from middleware.retrieve import Retrieval, RetrieveStep, source_records, sources_header
from middleware.semantic import SemanticStep
from middleware.shared import SharedUpstream
from middleware.singleflight import Flights
from middleware.store import Build, store_answer
from middleware.tasks import BackgroundTasks
from middleware.telemetry import (
    RequestRecord,
    Usage,
    record_request,
    span_attributes,
    usage_of_json,
    usage_of_sse,
)

SSE = "text/event-stream"
OUTCOME_BYTES = {outcome: outcome.value.encode() for outcome in Outcome}


@dataclass
class Observability:
    """Where a request leaves its traces: metrics, spans, the access log, per-tenant counts."""

    metrics: Metrics = field(default_factory=Metrics)
    tracing: Tracing = field(default_factory=Tracing)
    access_log: AccessLog | None = None
    stats: Stats = field(default_factory=Stats)


class Pipeline:
    """Runs one request through the cache layers and the upstream pool."""

    def __init__(
        self,
        *,
        exact: ExactStore | None,
        upstream: Upstream,
        semantic: SemanticStep | None = None,
        temporal: TemporalDetector | None = None,
        prefix: PrefixConfig | None = None,
        observability: Observability | None = None,
        background: BackgroundTasks | None = None,
        retrieve: RetrieveStep | None = None,
        flights: Flights | None = None,
        flight_lock: FlightLock | None = None,
        memo: RequestMemo | None = None,
    ) -> None:
        self.exact = exact
        self.retrieve = retrieve
        self.upstream = upstream
        self.semantic = semantic
        self.temporal = temporal
        self.prefix = prefix or PrefixConfig()
        self.obs = observability or Observability()
        self.metrics = self.obs.metrics
        self.tracing = self.obs.tracing
        self.stats = self.obs.stats
        self.background = background or BackgroundTasks()
        self.shared = SharedUpstream(self, flights, flight_lock) if flights is not None else None
        self.replay_json = JsonReplay()
        #: Byte-identical requests → their ``Prepared`` (filled by the API layer).
        self.memo = memo if memo is not None else RequestMemo(0)

    async def handle(
        self, req: GatewayRequest, disconnected: Disconnected, prepared: Prepared | None = None
    ) -> Response:
        """Answer ``req``; ``prepared`` is what ``prepare`` derived from it (memoised by the
        caller for byte-identical requests), computed here when not given."""
        started = time.perf_counter()
        with self.tracing.request_span("deja.request") as span:
            lookup = await self.lookup(req, prepared or self.prepare(req))
            self.stats.record(req.tenant, lookup.outcome)
            if lookup.answer is not None:
                response = self.replay(req, lookup)
                self.observe(req, lookup, started, span=span)
                return response
            status, replica, usage, reason = 500, None, None, "internal_error"
            try:
                response = await self.upstream_step(req, lookup, disconnected, started)
                status, replica = response.status_code, response.headers.get("x-deja-replica")
                reason = ""
                if response.headers.get("x-deja-cache") == Outcome.COALESCED:
                    lookup = dataclasses.replace(lookup, outcome=Outcome.COALESCED)
                if not req.stream and not self.stores(req, lookup):  # stored: counted there
                    usage = usage_of_json(bytes(response.body))
                return response
            except DejaError as exc:
                shape = http_error(exc)
                status, reason = shape.status, shape.code or shape.type
                raise
            finally:
                if not req.stream or status != 200:
                    self.observe(req, lookup, started, replica, status, span, usage, reason)
                elif span is not None:  # the stream is recorded when it ends; its span ends now
                    set_attributes(span, span_attributes(req, lookup, replica, status))

    def prepare(self, req: GatewayRequest) -> Prepared:
        """What steps 2 and 3 derive from the request alone, so a byte-identical request can
        reuse it (``middleware.memo``): the bypass reason and the exact key."""
        reason = self.bypass(req)
        entry_id = None
        if reason is None and self.exact is not None and req.cache and req.cacheable:
            entry_id = cache_key(req.tenant, req.endpoint, req.body, req.key_namespace)
        return Prepared(req, entry_id, reason)

    async def lookup(self, req: GatewayRequest, prepared: Prepared) -> Lookup:
        """Steps 1-4. 1. policy: ``req.policy`` was parsed from the headers at the API boundary."""
        reason = prepared.bypass
        if reason is not None:
            self.metrics.count(self.metrics.bypasses, reason)
            return Lookup(Outcome.BYPASS, None, bypass=reason)
        with self.tracing.span("deja.exact"):
            lookup = await exact_lookup(self.exact, req, prepared.entry_id, self.metrics)
        if lookup.answer is not None or self.semantic is None:
            return lookup
        with self.tracing.span("deja.semantic"):
            return await self.semantic.lookup(req, lookup)

    def check_corpus(self, req: GatewayRequest) -> None:
        """A RAG request names a corpus its tenant owns, hit or miss (404 otherwise; checked
        at the API boundary with the model, before the pipeline)."""
        if self.retrieve is None:
            raise CorpusNotFoundError(
                f"The corpus '{req.corpus}' does not exist.", param="X-Deja-Corpus"
            )
        self.retrieve.check(req)

    def bypass(self, req: GatewayRequest) -> str | None:
        """2. bypass: why this request skips the cache because its answer is time-dependent."""
        if self.exact is None or not req.cache:
            return None
        return bypass_reason(self.temporal, req)

    def replay(self, req: GatewayRequest, lookup: Lookup) -> Response:
        """A hit, in the shape the client asked for (JSON or SSE)."""
        answer = lookup.answer
        assert answer is not None and self.exact is not None
        self.exact.note_hit(answer.entry_id)
        tokens = (answer.usage or {}).get("completion_tokens")
        if isinstance(tokens, int):
            self.metrics.served_from_cache(tokens, self.upstream.pool.seconds_per_token())
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
        if req.stream:
            body = replay_sse(answer, model=req.model, include_usage=req.include_usage)
            return prebuilt_raw(body, SSE_TYPE, headers)
        return prebuilt_raw(self.replay_json(answer, model=req.model), JSON_TYPE, headers)

    async def retrieval(self, req: GatewayRequest, lookup: Lookup) -> Retrieval:
        """5. retrieve (RAG requests): the prompt with the corpus's top-k chunks as context."""
        if req.corpus is None or self.retrieve is None:
            return Retrieval(req)
        with self.tracing.span("deja.retrieve"):
            return await self.retrieve.retrieve(req, lookup.vector)

    def route(self, req: GatewayRequest) -> str | None:
        """6. route: the client's X-Prefix-Hash, else the hash of the prompt's static prefix
        (for a RAG request: the system prompt and the context block)."""
        if req.prefix_override:
            return req.prefix_override
        return prefix_hash(req.endpoint, req.body, self.prefix)

    async def upstream_step(
        self, req: GatewayRequest, lookup: Lookup, disconnected: Disconnected, started: float
    ) -> Response:
        """5 + 6 + 7. retrieve, route, then forward (JSON) or relay (SSE) to the chosen
        replica — once for all identical concurrent misses when they may be shared."""
        if self.shared is not None and lookup.entry_id is not None and req.policy.write:
            return await self.shared.respond(req, lookup, disconnected, started)
        rag = await self.retrieval(req, lookup)
        with self.tracing.span("deja.route") as span:
            prefix_key = self.route(rag.req)
            set_attributes(span, {"deja.prefix_hash": prefix_key})
        with self.tracing.span("deja.upstream"):
            if req.stream:
                return await self.relay(req, rag, lookup, prefix_key, disconnected, started)
            return await self.forward(req, rag, lookup, prefix_key, disconnected)

    async def forward(
        self,
        req: GatewayRequest,
        rag: Retrieval,
        lookup: Lookup,
        prefix_key: str | None,
        disconnected: Disconnected,
    ) -> Response:
        reply = await until_disconnect(
            self.upstream.complete(
                req.path, rag.req.raw, req.model, prefix_key, deadline=req.deadline
            ),
            disconnected,
        )
        headers = miss_headers(req, rag, lookup, reply.replica.name, reply.reason, prefix_key)
        body = reply.body
        if rag.sources:
            body = with_sources(body, source_records(rag.sources))
        if lookup.entry_id is not None and req.policy.write and rag.storable:
            entry_id, created = lookup.entry_id, time.time()
            self.store(req, lookup, lambda: parse_answer(reply.body, entry_id, req, created), rag)
        return prebuilt(body, JSON_TYPE, headers)

    async def relay(
        self,
        req: GatewayRequest,
        rag: Retrieval,
        lookup: Lookup,
        prefix_key: str | None,
        disconnected: Disconnected,
        started: float,
    ) -> Response:
        storable = lookup.entry_id is not None and req.policy.write and rag.storable
        # A stored answer must carry usage, so ask for it and hide it if the client did not.
        hide_usage = storable and not req.include_usage
        body = with_usage_requested(rag.req.body) if hide_usage else rag.req.raw
        opened = await until_disconnect(
            self.upstream.open_stream(req.path, body, req.model, prefix_key, deadline=req.deadline),
            disconnected,
        )
        replica = opened.replica.name

        async def chunks() -> AsyncIterator[bytes]:
            seen = bytearray()
            usage_filter = UsageChunkFilter() if hide_usage else None
            stamp = (
                SourcesStamp(SOURCES_FIELD, source_records(rag.sources)) if rag.sources else None
            )
            finished = False
            previous = last = b""  # the usage event is in the last reads
            try:
                async for chunk in opened.chunks():
                    previous, last = last, chunk
                    if storable:
                        seen += chunk
                    if usage_filter is not None:
                        chunk = usage_filter.feed(chunk)
                        if not chunk:
                            continue
                    if stamp is not None and not (chunk := stamp.feed(chunk)):
                        continue
                    yield chunk
                if usage_filter is not None and (rest := usage_filter.flush()):
                    yield stamp.feed(rest) if stamp is not None else rest
                if stamp is not None and (rest := stamp.flush()):
                    yield rest
                finished = True
            except UpstreamError as exc:
                yield stream_error_event(exc, req.request_id)
            finally:
                opened.close()
                usage = None if self.stores(req, lookup) else usage_of_sse(previous + last)
                self.observe(req, lookup, started, replica, usage=usage)
            if finished and storable:
                assert lookup.entry_id is not None
                entry_id, created = lookup.entry_id, time.time()
                self.store(
                    req,
                    lookup,
                    lambda: answer_from_sse(
                        bytes(seen), entry_id=entry_id, endpoint=req.endpoint, created_at=created
                    ),
                    rag,
                )

        headers = miss_headers(req, rag, lookup, replica, opened.reason, prefix_key)
        headers["cache-control"] = "no-cache"
        headers["x-accel-buffering"] = "no"
        return StreamingResponse(chunks(), media_type=SSE, headers=headers)

    def stores(self, req: GatewayRequest, lookup: Lookup) -> bool:
        """Whether a complete answer to ``req`` is stored (its tokens are then counted there,
        once per replica call even when single-flight shares it)."""
        return self.exact is not None and lookup.entry_id is not None and req.policy.write

    def store(self, req: GatewayRequest, lookup: Lookup, build: Build, rag: Retrieval) -> None:
        """8. store: parse and store the answer, with its sources, in a background task; the
        response does not wait."""
        if self.exact is not None:
            sources = source_records(rag.sources) if req.corpus is not None else None
            self.background.spawn(self._store(self.exact, req, lookup, build, sources))

    async def _store(
        self,
        exact: ExactStore,
        req: GatewayRequest,
        lookup: Lookup,
        build: Build,
        sources: list[dict[str, Any]] | None,
    ) -> None:
        with self.tracing.span("deja.store"):
            await store_answer(exact, self.semantic, self.metrics, req, lookup, build, sources)

    def observe(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        started: float,
        replica: str | None = None,
        status: int = 200,
        span: Span | None = None,
        usage: Usage | None = None,
        reason: str = "",
    ) -> None:
        """Metrics, the trace's request attributes and the access-log line, once per request;
        ``usage`` is an unstored replica answer's (a hit's comes from the stored answer),
        ``reason`` a failed request's error code."""
        entry = lookup.answer.entry_id if lookup.answer is not None else lookup.entry_id
        record_request(
            self.metrics,
            span,
            req,
            RequestRecord(
                outcome=lookup.outcome.value,
                seconds=time.perf_counter() - started,
                similarity=lookup.similarity,
                entry=entry,
                usage=lookup.answer.usage if lookup.answer is not None else usage,
                replica=replica,
                status=status,
                verifier_score=lookup.verifier_score,
                reason=reason,
            ),
            access_log=self.obs.access_log,
        )

    async def drain(self) -> None:
        """Wait for pending stores (used at shutdown and by tests)."""
        await self.background.drain()
