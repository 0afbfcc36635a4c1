"""The request path, top to bottom. Each step is one short method; ``handle`` reads like the
design page: policy → bypass → exact → semantic → upstream (route + forward or relay) → store
(off the response path).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import orjson
from opentelemetry.trace import Span
from starlette.responses import Response, StreamingResponse

from app.errors import (
    CacheUnavailableError,
    DejaError,
    EmbedderError,
    UpstreamError,
)
from middleware.accesslog import AccessLog
from middleware.disconnect import Disconnected, until_disconnect
from middleware.entry import CachedAnswer, answer_from_json
from middleware.exact import ExactStore
from middleware.keys import exact_key
from middleware.metrics import Metrics
from middleware.prefix import PrefixConfig, prefix_hash
from middleware.replay import replay_json, replay_sse
from middleware.request import GatewayRequest, Outcome
from middleware.responses import JSON as JSON_TYPE
from middleware.responses import SSE as SSE_TYPE
from middleware.responses import prebuilt
from middleware.semantic import (
    SEMANTIC_ERRORS,
    Candidate,
    ContextRule,
    SemanticCache,
    SemanticQuery,
    Verifier,
    question_text,
    semantic_query,
)
from middleware.sse import UsageChunkFilter, answer_from_sse, error_event, with_usage_requested
from middleware.stats import Stats
from middleware.telemetry import RequestRecord, record_request
from middleware.temporal import TemporalDetector
from middleware.thresholds import Thresholds
from middleware.tracing import Tracing, set_attributes
from middleware.upstream import Upstream

log = logging.getLogger("deja.pipeline")


SSE = "text/event-stream"


@dataclass(frozen=True, slots=True)
class Lookup:
    """Result of the cache steps: an answer to replay, or what a miss needs to be stored."""

    outcome: Outcome
    key: str | None
    answer: CachedAnswer | None = None
    bypass: str | None = None
    similarity: float | None = None
    query: SemanticQuery | None = None
    vector: list[float] | None = None


@dataclass(frozen=True, slots=True)
class SemanticSettings:
    """How the semantic layer runs (θ lives in ``Thresholds``: it is tuned while running)."""

    timeout: float
    context_rule: ContextRule = "conversation"


class Pipeline:
    """Runs one request through the cache layers and the upstream pool."""

    def __init__(
        self,
        *,
        exact: ExactStore | None,
        upstream: Upstream,
        semantic: SemanticCache | None = None,
        semantic_settings: SemanticSettings | None = None,
        temporal: TemporalDetector | None = None,
        verifier: Verifier | None = None,
        prefix: PrefixConfig | None = None,
        thresholds: Thresholds | None = None,
        metrics: Metrics | None = None,
        tracing: Tracing | None = None,
        access_log: AccessLog | None = None,
    ) -> None:
        self.exact = exact
        self.upstream = upstream
        self.semantic = semantic
        self.semantic_settings = semantic_settings or SemanticSettings(timeout=0.25)
        self.thresholds = thresholds or Thresholds(global_=1.0)
        self.stats = Stats()
        self.metrics = metrics or Metrics()
        self.tracing = tracing or Tracing()
        self.access_log = access_log
        self.temporal = temporal
        self.verifier = verifier
        self.prefix = prefix or PrefixConfig()
        self._background: set[asyncio.Task[None]] = set()
        self._semantic_failing = False

    async def handle(self, req: GatewayRequest, disconnected: Disconnected) -> Response:
        started = time.perf_counter()
        with self.tracing.request_span("deja.request") as span:
            # 1. policy: req.policy was parsed from the headers at the API boundary.
            lookup = await self.lookup(req)
            self.stats.record(req.tenant, lookup.outcome)
            if lookup.answer is not None:
                response = self.replay(req, lookup)
                self._observe(req, lookup, started, span=span)
                return response
            # 5 + 6. route and forward or relay; 7. store happens after the answer is complete
            status, replica = 500, None
            try:
                response = await self.to_upstream(req, lookup, disconnected, started)
                status, replica = response.status_code, response.headers.get("x-deja-replica")
                return response
            except DejaError as exc:
                status = exc.status_code
                raise
            finally:
                if not req.stream or status != 200:
                    self._observe(req, lookup, started, replica, status, span)

    def _observe(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        started: float,
        replica: str | None = None,
        status: int = 200,
        span: Span | None = None,
    ) -> None:
        """Metrics, the trace's request attributes and the access-log line, once per request."""
        entry = lookup.answer.entry_id if lookup.answer is not None else lookup.key
        record_request(
            self.metrics,
            span,
            req,
            RequestRecord(
                outcome=lookup.outcome.value,
                seconds=time.perf_counter() - started,
                similarity=lookup.similarity,
                entry=entry,
                usage=lookup.answer.usage if lookup.answer is not None else None,
                replica=replica,
                status=status,
            ),
            access_log=self.access_log,
        )

    async def lookup(self, req: GatewayRequest) -> Lookup:
        """Steps 2-4: bypass, exact, semantic."""
        # 2. bypass
        volatile = self.volatile(req)
        if volatile is not None:
            self.metrics.count(self.metrics.bypasses, volatile)
            return Lookup(Outcome.BYPASS, None, bypass=volatile)
        # 3. exact
        with self.tracing.span("deja.exact"):
            lookup = await self.exact_lookup(req)
        if lookup.answer is not None:
            return lookup
        # 4. semantic
        with self.tracing.span("deja.semantic"):
            return await self.semantic_lookup(req, lookup)

    # --- 2. bypass -------------------------------------------------------------------------------
    def volatile(self, req: GatewayRequest) -> str | None:
        """The bypass reason when the answer depends on when the question is asked."""
        if self.temporal is None or self.exact is None or not req.cache:
            return None
        found = self.temporal.check(question_text(req))
        return found.reason if found is not None else None

    # --- 3. exact --------------------------------------------------------------------------------
    async def exact_lookup(self, req: GatewayRequest) -> Lookup:
        if self.exact is None or not req.cache:
            return Lookup(Outcome.OFF, None)
        if not req.cacheable:
            return Lookup(Outcome.MISS, None)
        key = exact_key(req.tenant, req.endpoint, req.body, req.namespace)
        if not req.policy.read:
            return Lookup(Outcome.MISS, key)
        started = time.perf_counter()
        try:
            answer = await self.exact.get(key)
        except CacheUnavailableError:
            self.metrics.count(self.metrics.store_errors, "exact")
            return Lookup(Outcome.OFF, key)
        self.metrics.lookup("exact", time.perf_counter() - started)
        if answer is None or answer.older_than(req.policy.max_age):
            return Lookup(Outcome.MISS, key)
        return Lookup(Outcome.EXACT, key, answer)

    # --- 4. semantic -----------------------------------------------------------------------------
    async def semantic_lookup(self, req: GatewayRequest, lookup: Lookup) -> Lookup:
        # Answers live in the exact store: with it off, a semantic hit could not be served.
        if (
            self.semantic is None
            or self.exact is None
            or lookup.key is None
            or lookup.outcome is Outcome.OFF
        ):
            return lookup
        query = semantic_query(req, self.semantic_settings.context_rule, req.namespace)
        if query is None:
            return lookup
        lookup = dataclasses.replace(lookup, query=query)
        if not req.policy.read:
            return lookup
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.semantic_settings.timeout):
                vector, point = await self.semantic.search(query, max_age=req.policy.max_age)
        except SEMANTIC_ERRORS as exc:
            self._semantic_failed(exc)
            return dataclasses.replace(lookup, query=None)
        finally:  # every attempt counts, failed ones too (the timeout alert divides by it)
            self.metrics.lookup("semantic", time.perf_counter() - started)
        self._semantic_ok()
        score = point.score if point is not None else None
        if score is not None:
            self.metrics.similarity.observe(score)
        lookup = dataclasses.replace(lookup, vector=vector, similarity=score)
        configured = self.thresholds.resolve(req.tenant, req.model, req.tenant_threshold)
        threshold = max(configured, req.policy.min_similarity or 0.0)
        if point is None or point.score < threshold:
            return lookup
        try:
            answer = await self.exact.get(point.entry_id)
        except CacheUnavailableError:
            return lookup
        if answer is None:  # the entry expired or was evicted: drop its stale point
            self._forget_later(point.entry_id)
            return lookup
        candidate = Candidate(point=point, answer=answer)
        if self.verifier is not None and not await self.verifier.accept(query, candidate):
            return lookup
        return dataclasses.replace(lookup, outcome=Outcome.SEMANTIC, answer=answer)

    def _semantic_failed(self, exc: BaseException) -> None:
        kind = (
            "timeout"
            if isinstance(exc, TimeoutError)
            else "embedder"
            if isinstance(exc, EmbedderError)
            else "store"
        )
        self.metrics.count(self.metrics.semantic_errors, kind)
        if not self._semantic_failing:
            log.warning("semantic layer skipped (serving as miss): %s", exc or type(exc).__name__)
        self._semantic_failing = True

    def _semantic_ok(self) -> None:
        if self._semantic_failing:
            log.info("semantic layer answering again")
        self._semantic_failing = False

    def replay(self, req: GatewayRequest, lookup: Lookup) -> Response:
        answer = lookup.answer
        assert answer is not None and self.exact is not None
        self.exact.note_hit(answer.entry_id)
        tokens = (answer.usage or {}).get("completion_tokens")
        if isinstance(tokens, int):
            self.metrics.served_from_cache(tokens, self.upstream.pool.seconds_per_token())
        headers = {
            "x-deja-cache": lookup.outcome.value,
            "x-deja-entry": answer.entry_id,
            "age": str(int(answer.age(time.time()))),
            "x-request-id": req.request_id,
        }
        if lookup.similarity is not None:
            headers["x-deja-similarity"] = f"{lookup.similarity:.4f}"
        if req.stream:
            body = replay_sse(answer, model=req.model, include_usage=req.include_usage)
            return prebuilt(body, SSE_TYPE, headers)
        return prebuilt(replay_json(answer, model=req.model), JSON_TYPE, headers)

    # --- 5 + 6. upstream --------------------------------------------------------------------------
    async def to_upstream(
        self, req: GatewayRequest, lookup: Lookup, disconnected: Disconnected, started: float
    ) -> Response:
        with self.tracing.span("deja.route") as span:
            key = self.prefix_key(req)
            set_attributes(span, {"deja.prefix_hash": key})
        with self.tracing.span("deja.upstream"):
            if req.stream:
                return await self.relay_stream(req, lookup, key, disconnected, started)
            return await self.forward(req, lookup, key, disconnected)

    def prefix_key(self, req: GatewayRequest) -> str | None:
        """5. route: the client's X-Prefix-Hash, else the hash of the prompt's static prefix."""
        if req.prefix_override:
            return req.prefix_override
        return prefix_hash(req.endpoint, req.body, self.prefix)

    async def forward(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        key: str | None,
        disconnected: Disconnected,
    ) -> Response:
        reply = await until_disconnect(
            self.upstream.complete(req.path, req.raw, req.model, key), disconnected
        )
        headers = self._miss_headers(req, lookup, reply.replica.name, reply.reason, key)
        if self._should_store(req, lookup):
            assert lookup.key is not None
            key, created = lookup.key, time.time()

            def build() -> CachedAnswer | None:
                body = orjson.loads(reply.body)
                if not isinstance(body, dict):
                    return None
                return answer_from_json(
                    body, entry_id=key, endpoint=req.endpoint, created_at=created
                )

            self.store_later(req, lookup, build)
        return prebuilt(reply.body, JSON_TYPE, headers)

    async def relay_stream(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        key: str | None,
        disconnected: Disconnected,
        started: float,
    ) -> Response:
        store = self._should_store(req, lookup)
        # A stored answer must carry usage, so ask for it and hide it if the client did not.
        hide_usage = store and not req.include_usage
        body = with_usage_requested(req.body) if hide_usage else req.raw
        opened = await until_disconnect(
            self.upstream.open_stream(req.path, body, req.model, key), disconnected
        )
        replica = opened.replica.name

        async def relay() -> AsyncIterator[bytes]:
            seen = bytearray()
            usage_filter = UsageChunkFilter() if hide_usage else None
            finished = False
            try:
                async for chunk in opened.chunks():
                    if store:
                        seen += chunk
                    if usage_filter is not None:
                        chunk = usage_filter.feed(chunk)
                        if not chunk:
                            continue
                    yield chunk
                if usage_filter is not None and (rest := usage_filter.flush()):
                    yield rest
                finished = True
            except UpstreamError as exc:
                yield error_event(exc.message, exc.code or "upstream_error")
            finally:
                opened.close()
                self._observe(req, lookup, started, replica)
            if finished and store:
                assert lookup.key is not None
                key, created = lookup.key, time.time()
                self.store_later(
                    req,
                    lookup,
                    lambda: answer_from_sse(
                        bytes(seen), entry_id=key, endpoint=req.endpoint, created_at=created
                    ),
                )

        headers = self._miss_headers(req, lookup, replica, opened.reason, key)
        headers["cache-control"] = "no-cache"
        headers["x-accel-buffering"] = "no"
        return StreamingResponse(relay(), media_type=SSE, headers=headers)

    def _miss_headers(
        self, req: GatewayRequest, lookup: Lookup, replica: str, reason: str, key: str | None
    ) -> dict[str, str]:
        headers = {
            "x-deja-cache": lookup.outcome.value,
            "x-deja-replica": replica,
            "x-deja-route": reason,
            "x-request-id": req.request_id,
        }
        if key is not None:
            headers["x-prefix-hash"] = key
        if lookup.key is not None:
            headers["x-deja-entry"] = lookup.key
        if lookup.similarity is not None:  # how close the miss came
            headers["x-deja-similarity"] = f"{lookup.similarity:.4f}"
        if lookup.bypass is not None:
            headers["x-deja-bypass"] = lookup.bypass
        return headers

    @staticmethod
    def _should_store(req: GatewayRequest, lookup: Lookup) -> bool:
        return lookup.key is not None and req.policy.write

    # --- 7. store (off the response path) --------------------------------------------------------
    def store_later(
        self, req: GatewayRequest, lookup: Lookup, build: Callable[[], CachedAnswer | None]
    ) -> None:
        """Parse and store the answer in a background task; the response does not wait."""
        self._spawn(self._store(req, lookup, build))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _store(
        self, req: GatewayRequest, lookup: Lookup, build: Callable[[], CachedAnswer | None]
    ) -> None:
        with self.tracing.span("deja.store"):
            await self._store_answer(req, lookup, build)

    async def _store_answer(
        self, req: GatewayRequest, lookup: Lookup, build: Callable[[], CachedAnswer | None]
    ) -> None:
        if self.exact is None or lookup.key is None:
            return
        try:
            built = build()
        except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
            log.warning("not caching an answer that could not be parsed: %s", exc)
            return
        if built is None:
            return
        ttl = req.policy.ttl
        answer = dataclasses.replace(
            built,
            tenant=req.tenant,
            namespace=req.namespace,
            question=question_text(req) or None,
            expires_at=built.created_at + ttl,
        )
        try:
            await self.exact.set(lookup.key, answer, ttl)
        except CacheUnavailableError:
            self.metrics.count(self.metrics.store_errors, "exact")
            return  # already logged by the store; the answer was served regardless
        if self.semantic is not None and lookup.query is not None:
            try:
                await self.semantic.add(
                    lookup.query,
                    entry_id=lookup.key,
                    vector=lookup.vector,
                    created_at=answer.created_at,
                    ttl=ttl,
                )
            except SEMANTIC_ERRORS as exc:
                self.metrics.count(self.metrics.store_errors, "semantic")
                self._semantic_failed(exc)

    def _forget_later(self, entry_id: str) -> None:
        if self.semantic is not None:
            self._spawn(self._forget(entry_id))

    async def _forget(self, entry_id: str) -> None:
        assert self.semantic is not None
        try:
            await self.semantic.store.delete([entry_id])
        except SEMANTIC_ERRORS as exc:
            self._semantic_failed(exc)

    async def drain(self) -> None:
        """Wait for pending stores (used at shutdown and by tests)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
