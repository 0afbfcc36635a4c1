"""The consumers' side of single-flight (``middleware.singleflight``): turning a shared flight
into one client's response.

- The leader's client gets the replica's answer as the leader would have without flights: the
  JSON body, or the stream's events (without the usage event unless it asked for usage).
- A follower gets the same answer re-stamped with its own ``id`` and ``created``: a streamed
  follower of a streamed flight receives the events as they arrive; any other pairing (a JSON
  follower of a stream, a streamed follower of a JSON call, an answer another process stored)
  is replayed from the finished answer.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import orjson
from starlette.responses import Response, StreamingResponse

from deja.cache.entry import CachedAnswer
from deja.errors import ClientGoneError, UpstreamError
from deja.request import GatewayRequest, Outcome
from deja.upstream.deadline import within
from middleware.disconnect import Disconnected, until_disconnect
from middleware.errors import stream_error_event
from middleware.lookup import Lookup
from middleware.relay import UsageChunkFilter
from middleware.replay import fresh_id, replay_json, replay_sse
from middleware.responses import JSON, SSE, prebuilt
from middleware.singleflight import Flight, FlightFailed, Flights, Opened, Restamp

T = TypeVar("T")

#: ``observe(req, lookup, started, replica)``: the once-per-request record of a finished stream.
Observe = Callable[[GatewayRequest, Lookup, float, str | None], None]


def restamped_json(body: bytes) -> bytes:
    """A JSON answer with a fresh ``id`` and ``created`` (unchanged if it is not an object)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(parsed, dict):
        return body
    parsed["id"] = fresh_id("chat" if parsed.get("object") == "chat.completion" else "cmpl")
    parsed["created"] = int(time.time())
    return orjson.dumps(parsed)


def as_follower(lookup: Lookup) -> Lookup:
    return dataclasses.replace(lookup, outcome=Outcome.COALESCED)


class Consumer:
    """Builds one client's response from a flight."""

    def __init__(self, flights: Flights, observe: Observe) -> None:
        self.flights = flights
        self.observe = observe

    async def respond(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        flight: Flight,
        *,
        leader: bool,
        disconnected: Disconnected,
        started: float,
    ) -> Response:
        """The response for this request; raises ``FlightFailed`` when the flight failed
        before anything was sent (the caller retries or reports it)."""
        flight.consumers += 1
        handed_over = False
        try:
            opened = await self._wait(req, flight.wait_opened(), disconnected)
            follower = not leader or opened.remote
            if req.stream and opened.streamed and not opened.remote:
                handed_over = True
                return self._stream(req, lookup, flight, opened, follower, started)
            await self._wait(req, flight.wait_done(), disconnected)
            return self._finished(req, lookup, flight, opened, follower)
        finally:
            if not handed_over:
                self.flights.leave(flight)

    @staticmethod
    async def _wait(
        req: GatewayRequest, work: Coroutine[Any, Any, T], disconnected: Disconnected
    ) -> T:
        """``work`` until the client leaves or the request's own deadline passes."""
        if req.deadline is None:
            return await until_disconnect(work, disconnected)
        async with within(req.deadline, "waiting for an identical request's answer"):
            return await until_disconnect(work, disconnected)

    def _finished(
        self, req: GatewayRequest, lookup: Lookup, flight: Flight, opened: Opened, follower: bool
    ) -> Response:
        headers = self._headers(req, opened, follower)
        if not req.stream and flight.body is not None:
            body = restamped_json(flight.body) if follower else flight.body
            return prebuilt(body, JSON, headers)
        answer = flight.answer
        if answer is None:  # nothing replayable: this request calls the replica itself
            raise FlightFailed(None, retry=True)
        return self._replay(req, answer, headers)

    def _replay(
        self, req: GatewayRequest, answer: CachedAnswer, headers: dict[str, str]
    ) -> Response:
        headers["x-deja-entry"] = answer.entry_id
        if req.stream:
            body = replay_sse(answer, model=req.model, include_usage=req.include_usage)
            return prebuilt(body, SSE, headers)
        return prebuilt(replay_json(answer, model=req.model), JSON, headers)

    def _stream(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        flight: Flight,
        opened: Opened,
        follower: bool,
        started: float,
    ) -> Response:
        restamp = Restamp(req.endpoint, include_usage=req.include_usage) if follower else None
        usage = UsageChunkFilter() if not follower and not req.include_usage else None
        record = as_follower(lookup) if follower else lookup

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for raw in flight.stream():
                    out = raw
                    if restamp is not None:
                        out = restamp.feed(raw)
                    elif usage is not None:
                        out = usage.feed(raw)
                    if out:
                        yield out
                if usage is not None and (rest := usage.flush()):
                    yield rest
            except FlightFailed as failed:
                error = failed.error or UpstreamError("the replica's answer was cut short")
                if not isinstance(error, ClientGoneError):
                    yield stream_error_event(error, req.request_id)
            finally:
                self.flights.leave(flight)
                self.observe(req, record, started, opened.replica)

        headers = self._headers(req, opened, follower)
        headers["cache-control"] = "no-cache"
        headers["x-accel-buffering"] = "no"
        return StreamingResponse(chunks(), media_type="text/event-stream", headers=headers)

    @staticmethod
    def _headers(req: GatewayRequest, opened: Opened, follower: bool) -> dict[str, str]:
        headers = dict(opened.headers)
        headers["x-request-id"] = req.request_id
        if follower:
            headers["x-deja-cache"] = Outcome.COALESCED.value
            for name in ("x-deja-similarity", "x-deja-verifier-score", "x-deja-bypass"):
                headers.pop(name, None)
        return headers
