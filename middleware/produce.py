"""Steps 5-8 of the request path, the one copy: retrieve → route → call the replica → a
:class:`Produced` record, and (step 8, in the background) store it.

:meth:`ProduceStep.produce` returns a :class:`Call` as soon as the replica has answered (a JSON
body) or begun (a stream): its :class:`Head` says where the call went and carries the response
headers, and a stream's :meth:`Call.chunks` yields the replica's bytes as they arrive. When the
answer is complete the call holds its :class:`Produced` record: the parsed answer, the body the
client gets, the usage. The tokens are counted and the answer is stored there, once per replica
call, whoever reads it.

Two consumers read a call, and nothing else does: the direct path (:meth:`ProduceStep.direct`,
one client) and a single-flight producer (``middleware.flight``), which publishes the same
chunks to every identical request waiting on it.

5. retrieve (RAG requests): the corpus's best chunks over the relevance floor become the
   prompt's context block (``middleware.retrieve``); they are the answer's sources, in the
   header, on a JSON body and on the stream's finishing chunk (``deja_sources``).
6. route: the client's ``X-Prefix-Hash``, else the hash of the prompt's static prefix; the
   upstream picks the replica that holds it.
7. upstream: ``Upstream.complete`` (JSON) or ``Upstream.open_stream`` (SSE).
8. store: ``middleware.store``, off the response path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import orjson

from deja.cache.entry import CachedAnswer
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing, set_attributes
from deja.request import GatewayRequest
from deja.upstream.prefix import PrefixConfig, prefix_hash
from deja.upstream.upstream import Upstream, UpstreamStream
from middleware.answers import answer_from_sse, parse_answer, usage_of_json, with_sources
from middleware.disconnect import Disconnected, until_disconnect
from middleware.headers import miss_headers
from middleware.lookup import Lookup
from middleware.replay import SOURCES_FIELD
from middleware.responses import JSON, SSE
from middleware.retrieve import Retrieval, RetrieveStep, source_records
from middleware.sse import Framer, Usage, usage_of_stream, with_field_on_finish, without_usage
from middleware.store import StoreStep

log = logging.getLogger("deja.pipeline")


@dataclass(frozen=True, slots=True)
class Head:
    """Where a replica call went, known before its body: the replica, the response headers,
    whether it streams, and whether the replica was asked for a usage event the client did
    not ask for (a stored answer must carry usage), which the client's copy then drops."""

    replica: str
    headers: dict[str, str]
    streamed: bool = False
    hide_usage: bool = False


@dataclass(frozen=True, slots=True)
class Produced:
    """What one replica call produced, once complete: the one record that storing, the
    request's record and single-flight's followers read."""

    replica: str
    #: The cacheable answer (None: not storable, not cacheable, or the stream was cut short).
    answer: CachedAnswer | None
    #: A JSON answer's body as the client gets it (with ``deja_sources``); None for a stream.
    body: bytes | None
    usage: Usage | None


class Call:
    """One replica call under way. ``produced`` is set when the answer is complete: at once
    for a JSON answer, when :meth:`chunks` has been read to the end for a stream."""

    def __init__(self, head: Head, produced: Produced | None = None) -> None:
        self.head = head
        self.produced = produced
        #: A stream's bytes as they arrive (set by ``ProduceStep.open_stream``; None for JSON).
        self.source: AsyncGenerator[bytes, None] | None = None
        #: The answer's background write (8), once started; None when it is not stored.
        self.stored: asyncio.Task[None] | None = None

    def chunks(self) -> AsyncGenerator[bytes, None]:
        """The stream's raw bytes as they arrive; raises the upstream's error when it fails
        midway. Read it once, inside ``aclosing``."""
        assert self.source is not None, "a JSON answer has no chunks"
        return self.source


@dataclass(slots=True)
class Reply:
    """A miss's answer for one client, as the pipeline turns it into a response: the lookup to
    record it under (``coalesced`` for a follower), where it went, its headers, and either a
    complete ``body`` or a ``stream``. :meth:`record` is the call's ``Produced`` record once
    the stream has ended (None for a follower that replayed another process's answer)."""

    lookup: Lookup
    replica: str | None
    headers: dict[str, str]
    media_type: bytes = JSON
    body: bytes = b""
    stream: AsyncGenerator[bytes, None] | None = None
    produced: Produced | None = None
    #: The direct call this reply streams as it is (its record is complete when the stream is).
    call: Call | None = None

    def record(self) -> Produced | None:
        """What the replica call produced, as far as it is known now."""
        if self.produced is None and self.call is not None:
            return self.call.produced
        return self.produced


def with_usage_requested(body: dict[str, Any]) -> bytes:
    """The request body re-serialised with ``stream_options.include_usage`` on."""
    options = body.get("stream_options") or {}
    return orjson.dumps({**body, "stream_options": {**options, "include_usage": True}})


class ProduceStep:
    """Steps 5-8 for one miss: retrieve, route, call the replica, count and store the answer."""

    def __init__(
        self,
        upstream: Upstream,
        metrics: Metrics,
        tracing: Tracing,
        *,
        prefix: PrefixConfig | None = None,
        retrieve_step: RetrieveStep | None = None,
        store_step: StoreStep | None = None,
    ) -> None:
        self.upstream = upstream
        self.metrics = metrics
        self.tracing = tracing
        self.prefix = prefix or PrefixConfig()
        self.retrieve_step = retrieve_step
        self.store_step = store_step

    async def direct(
        self, req: GatewayRequest, lookup: Lookup, disconnected: Disconnected
    ) -> Reply:
        """One client's miss, no flight: the call, cancelled if the client goes away before the
        replica answers, as this client's reply."""
        call = await until_disconnect(self.produce(req, lookup), disconnected)
        head, produced = call.head, call.produced
        if produced is not None:
            body = produced.body if produced.body is not None else b""
            return Reply(lookup, head.replica, head.headers, body=body, produced=produced)
        if not head.hide_usage:  # the replica's bytes as they are: no generator in between
            return Reply(lookup, head.replica, head.headers, SSE, stream=call.chunks(), call=call)
        reply = Reply(lookup, head.replica, head.headers, SSE)
        reply.stream = self.relayed(call, reply)
        return reply

    async def relayed(self, call: Call, reply: Reply) -> AsyncGenerator[bytes, None]:
        """The stream as this client gets it when the gateway asked the replica for a usage
        event on the client's behalf: the replica's bytes as they arrive, without that event."""
        framer = Framer()
        async with aclosing(call.chunks()) as chunks:
            async for chunk in chunks:
                if block := without_usage(framer.feed(chunk)):
                    yield block
        if rest := framer.flush():
            yield rest
        reply.produced = call.produced

    async def produce(self, req: GatewayRequest, lookup: Lookup) -> Call:
        """5. retrieve, 6. route, 7. call the replica."""
        rag = await self.retrieve(req, lookup)
        with self.tracing.span("deja.route") as span:
            prefix_key = self.route(rag.req)
            set_attributes(span, {"deja.prefix_hash": prefix_key})
        with self.tracing.span("deja.upstream"):
            if req.stream:
                return await self.open_stream(req, lookup, rag, prefix_key)
            return await self.complete(req, lookup, rag, prefix_key)

    async def retrieve(self, req: GatewayRequest, lookup: Lookup) -> Retrieval:
        """5. retrieve (RAG requests): the prompt with the corpus's top-k chunks as context."""
        if req.corpus is None or self.retrieve_step is None:
            return Retrieval(req)
        with self.tracing.span("deja.retrieve"):
            return await self.retrieve_step.retrieve(req, lookup.vector)

    def route(self, req: GatewayRequest) -> str | None:
        """6. route: the client's X-Prefix-Hash, else the hash of the prompt's static prefix
        (for a RAG request: the system prompt and the context block)."""
        if req.prefix_override:
            return req.prefix_override
        return prefix_hash(req.endpoint, req.body, self.prefix)

    async def complete(
        self, req: GatewayRequest, lookup: Lookup, rag: Retrieval, prefix_key: str | None
    ) -> Call:
        """7. a JSON answer, complete when the call returns."""
        reply = await self.upstream.complete(
            req.path, rag.req.raw, req.model, prefix_key, deadline=req.deadline
        )
        name = reply.replica.name
        head = Head(name, miss_headers(req, rag, lookup, name, reply.reason, prefix_key))
        sources = source_records(rag.sources)
        body = with_sources(reply.body, sources) if sources else reply.body
        answer = None
        if lookup.storable and rag.storable and lookup.entry_id is not None:
            answer = self.parsed(
                lambda: parse_answer(reply.body, lookup.entry_id or "", req.endpoint, time.time()),
                rag,
            )
        usage = answer.usage if answer is not None else usage_of_json(reply.body)
        produced = Produced(name, answer, body, usage)
        call = Call(head, produced)
        call.stored = self.done(req, lookup, rag, produced)
        return call

    async def open_stream(
        self, req: GatewayRequest, lookup: Lookup, rag: Retrieval, prefix_key: str | None
    ) -> Call:
        """7. a stream, open once the replica has answered with its status."""
        hide_usage = lookup.storable and not req.include_usage
        body = with_usage_requested(rag.req.body) if hide_usage else rag.req.raw
        opened = await self.upstream.open_stream(
            req.path, body, req.model, prefix_key, deadline=req.deadline
        )
        name = opened.replica.name
        headers = miss_headers(req, rag, lookup, name, opened.reason, prefix_key)
        call = Call(Head(name, headers, streamed=True, hide_usage=hide_usage))
        call.source = self.streamed(call, opened, req, lookup, rag)
        return call

    async def streamed(
        self,
        call: Call,
        opened: UpstreamStream,
        req: GatewayRequest,
        lookup: Lookup,
        rag: Retrieval,
    ) -> AsyncGenerator[bytes, None]:
        """The replica's bytes as they arrive (a RAG answer's framed, its sources put on the
        chunk that finishes it); at a clean end, the call's Produced record."""
        store = lookup.storable and rag.storable and lookup.entry_id is not None
        seen = bytearray()
        previous = last = b""  # the usage event is in the last reads
        sources = source_records(rag.sources)
        framer = Framer() if sources else None
        try:
            async for chunk in opened.chunks():
                previous, last = last, chunk
                if store:
                    seen += chunk
                if framer is None:
                    yield chunk
                    continue
                block = framer.feed(chunk)
                if sources and (stamped := with_field_on_finish(block, SOURCES_FIELD, sources)):
                    block, sources = stamped, []
                if block:
                    yield block
            if framer is not None and (rest := framer.flush()):
                yield rest
        finally:
            opened.close()
        answer = None
        if store:
            entry_id, created, raw = lookup.entry_id or "", time.time(), bytes(seen)
            answer = self.parsed(
                lambda: answer_from_sse(
                    raw, entry_id=entry_id, endpoint=req.endpoint, created_at=created
                ),
                rag,
            )
        usage = answer.usage if answer is not None else usage_of_stream(previous + last)
        call.produced = Produced(call.head.replica, answer, None, usage)
        call.stored = self.done(req, lookup, rag, call.produced)

    def parsed(
        self, parse: Callable[[], CachedAnswer | None], rag: Retrieval
    ) -> CachedAnswer | None:
        """``parse()`` with the RAG sources it was built from (so a follower's replay carries
        them as the leader's answer did), or None (logged) for an answer too malformed to
        cache."""
        try:
            answer = parse()
        except (TypeError, ValueError) as exc:
            log.warning("not caching an answer that could not be parsed: %s", exc)
            return None
        records = rag.records
        if answer is None or records is None:
            return answer
        return dataclasses.replace(answer, sources=records)

    def done(
        self, req: GatewayRequest, lookup: Lookup, rag: Retrieval, produced: Produced
    ) -> asyncio.Task[None] | None:
        """The call is complete: its tokens (the tuning workload) counted once, and its answer
        stored (8) when it may be: never one built without the context retrieval failed on.
        Returns the store's background write, if one started."""
        if produced.usage:
            self.metrics.tokens(req.model, produced.usage)
        if produced.answer is None or self.store_step is None:
            return None
        return self.store_step.store(req, lookup, produced.answer, rag.records)
