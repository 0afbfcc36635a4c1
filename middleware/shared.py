"""Step 7 with single-flight: the producer's side (``middleware.singleflight`` holds the
flight, ``middleware.coalesce`` the consumers).

The first identical miss leads: its upstream call (retrieval, routing, the replica, the store)
runs in a task of its own that publishes to the flight. Across processes, a short Redis lock
per entry id makes one gateway call the replica while the others poll the shared exact store
for its answer (best effort: never longer than the lock's TTL, and a Redis failure leads).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from starlette.responses import Response

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import ExactStore
from deja.cache.flightlock import FlightLock
from deja.errors import CacheUnavailableError, ClientGoneError, DejaError
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing, set_attributes
from deja.replicas.upstream import Upstream
from deja.request import GatewayRequest
from middleware.answers import parse_answer, with_sources
from middleware.coalesce import Consumer
from middleware.disconnect import Disconnected
from middleware.headers import miss_headers
from middleware.lookup import Lookup
from middleware.relay import SourcesStamp, answer_from_sse, with_usage_requested
from middleware.replay import SOURCES_FIELD
from middleware.retrieve import Retrieval, source_records
from middleware.singleflight import Flight, FlightFailed, Flights, Opened
from middleware.store import Build

#: How often a request waiting on another process's identical call looks for its answer.
REMOTE_POLL_SECONDS = 0.02


class Steps(Protocol):
    """The pipeline's steps a producer runs (``middleware.pipeline.Pipeline``)."""

    exact: ExactStore | None
    upstream: Upstream
    metrics: Metrics
    tracing: Tracing

    def observe(
        self, req: GatewayRequest, lookup: Lookup, started: float, replica: str | None = None
    ) -> None: ...

    async def retrieval(self, req: GatewayRequest, lookup: Lookup) -> Retrieval: ...

    def route(self, req: GatewayRequest) -> str | None: ...

    def store(self, req: GatewayRequest, lookup: Lookup, build: Build, rag: Retrieval) -> None: ...


class SharedUpstream:
    """Identical concurrent misses share one upstream call."""

    def __init__(self, steps: Steps, flights: Flights, lock: FlightLock | None = None) -> None:
        self.steps = steps
        self.flights = flights
        self.lock = lock
        self.consumer = Consumer(flights, steps.observe)

    async def respond(
        self, req: GatewayRequest, lookup: Lookup, disconnected: Disconnected, started: float
    ) -> Response:
        """7. upstream, single-flight: join the running call for this entry id, or lead a new
        one (``middleware.singleflight``). A follower whose flight failed before it sent
        anything tries again, and may lead the next one."""
        assert lookup.entry_id is not None
        while True:
            flight, leader = self.flights.join(lookup.entry_id)
            if leader:
                self.flights.start(flight, self.produce(req, lookup, flight))
            else:
                self.steps.metrics.count(self.steps.metrics.coalesced, "local")
            try:
                return await self.consumer.respond(
                    req, lookup, flight, leader=leader, disconnected=disconnected, started=started
                )
            except FlightFailed as failed:
                if not leader and failed.retry:
                    continue
                if failed.error is not None:
                    raise failed.error from None
                raise ClientGoneError("the client went away before the replica answered") from None

    async def produce(self, req: GatewayRequest, lookup: Lookup, flight: Flight) -> None:
        """A flight's upstream call, in its own task: retrieve, route, call the replica,
        publish what arrives to the flight, store the answer. Across processes, a Redis lock
        makes one gateway call the replica while the others wait for its stored answer."""
        assert lookup.entry_id is not None
        lock = self.lock
        if lock is not None and not await lock.acquire(lookup.entry_id):
            answer = await self.remote_answer(lookup.entry_id, lock)
            if answer is not None:
                self.steps.metrics.count(self.steps.metrics.coalesced, "remote")
                headers = {"x-deja-cache": "coalesced", "x-deja-entry": answer.entry_id}
                flight.open(Opened("", headers, remote=True))
                flight.finish(answer)
                return
        try:
            await self._produce(req, lookup, flight)
        except DejaError as exc:
            flight.fail(exc)
        finally:
            if lock is not None:
                await lock.release(lookup.entry_id)

    async def _produce(self, req: GatewayRequest, lookup: Lookup, flight: Flight) -> None:
        rag = await self.steps.retrieval(req, lookup)
        with self.steps.tracing.span("deja.route") as span:
            prefix_key = self.steps.route(rag.req)
            set_attributes(span, {"deja.prefix_hash": prefix_key})
        with self.steps.tracing.span("deja.upstream"):
            answer = await self._call(req, lookup, flight, rag, prefix_key)
        if answer is not None and rag.storable:
            built = answer
            self.steps.store(req, lookup, lambda: built, rag)

    async def _call(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        flight: Flight,
        rag: Retrieval,
        prefix_key: str | None,
    ) -> CachedAnswer | None:
        """The replica's answer, published to the flight as it arrives."""
        assert lookup.entry_id is not None
        entry_id, created = lookup.entry_id, time.time()
        answer: CachedAnswer | None
        if req.stream:
            body = with_usage_requested(rag.req.body)  # a stored answer must carry usage
            opened = await self.steps.upstream.open_stream(
                req.path, body, req.model, prefix_key, deadline=req.deadline
            )
            name = opened.replica.name
            headers = miss_headers(req, rag, lookup, name, opened.reason, prefix_key)
            flight.open(Opened(name, headers, streamed=True))
            sources = source_records(rag.sources)
            stamp = SourcesStamp(SOURCES_FIELD, sources) if sources else None
            try:
                async for chunk in opened.chunks():
                    if stamp is None:
                        flight.push(chunk)
                    elif stamped := stamp.feed(chunk):
                        flight.push(stamped)
                if stamp is not None and (rest := stamp.flush()):
                    flight.push(rest)
            finally:
                opened.close()
            answer = answer_from_sse(
                b"".join(flight.chunks),
                entry_id=entry_id,
                endpoint=req.endpoint,
                created_at=created,
            )
            flight.finish(answer)
        else:
            reply = await self.steps.upstream.complete(
                req.path, rag.req.raw, req.model, prefix_key, deadline=req.deadline
            )
            name = reply.replica.name
            headers = miss_headers(req, rag, lookup, name, reply.reason, prefix_key)
            flight.open(Opened(name, headers))
            answer = parse_answer(reply.body, entry_id, req, created)
            sources = source_records(rag.sources)
            flight.finish(answer, with_sources(reply.body, sources) if sources else reply.body)
        return answer

    async def remote_answer(self, entry_id: str, lock: FlightLock) -> CachedAnswer | None:
        """Another process leads: poll the shared exact store until its answer is there, or
        its lock is gone (it finished without a cacheable answer, or died)."""
        exact = self.steps.exact
        assert exact is not None
        while True:
            try:
                answer = await exact.get(entry_id)
            except CacheUnavailableError:
                return None
            if answer is not None:
                return answer
            if not await lock.held(entry_id):
                return None
            await asyncio.sleep(REMOTE_POLL_SECONDS)
