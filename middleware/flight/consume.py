"""A flight, turned into one client's :class:`Reply`.

- The leader's client gets the replica's answer as it would have without flights: the JSON
  body, or the stream's events (without the usage event the gateway asked for on its behalf).
- A follower gets the same answer re-stamped with its own ``id`` and ``created``, recorded as
  ``coalesced``: a streamed follower of a streamed flight receives the events as they arrive;
  any other pairing (a JSON follower of a stream, a streamed follower of a JSON call, an answer
  another process stored) is replayed from the finished answer.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, Coroutine
from contextlib import aclosing
from typing import Any, TypeVar

import orjson

from deja.errors import ClientGoneError, UpstreamError
from deja.request import GatewayRequest, Outcome
from deja.upstream.deadline import within
from middleware.disconnect import Disconnected, until_disconnect
from middleware.errors import stream_error_event
from middleware.flight.table import Flight, FlightFailed, Flights
from middleware.lookup import Lookup
from middleware.produce import Head, Reply
from middleware.replay import fresh_id, replay_json, replay_sse
from middleware.responses import JSON, SSE
from middleware.sse import Framer, json_object, restamp, without_usage

T = TypeVar("T")

#: A leader's headers that describe its own lookup, not a follower's.
_LOOKUP_HEADERS = ("x-deja-similarity", "x-deja-verifier-score", "x-deja-bypass")


def restamped_json(body: bytes) -> bytes:
    """A JSON answer with a fresh ``id`` and ``created`` (unchanged if it is not an object)."""
    parsed = json_object(body)
    if parsed is None:
        return body
    parsed["id"] = fresh_id("chat" if parsed.get("object") == "chat.completion" else "cmpl")
    parsed["created"] = int(time.time())
    return orjson.dumps(parsed)


class Consumer:
    """Builds one client's reply from a flight."""

    def __init__(self, flights: Flights) -> None:
        self.flights = flights

    async def reply(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        flight: Flight,
        *,
        leader: bool,
        disconnected: Disconnected,
    ) -> Reply:
        """This request's reply; raises ``FlightFailed`` when the flight failed before
        anything was sent (the caller retries or reports it)."""
        flight.consumers += 1
        handed_over = False
        try:
            head = await self.wait(req, flight.wait_opened(), disconnected)
            follower = not leader or flight.remote
            if follower:
                lookup = dataclasses.replace(lookup, outcome=Outcome.COALESCED)
            if req.stream and head.streamed and not flight.remote:
                handed_over = True
                return self.streamed(req, lookup, flight, head, follower)
            await self.wait(req, flight.wait_done(), disconnected)
            return self.finished(req, lookup, flight, head, follower)
        finally:
            if not handed_over:
                self.flights.leave(flight)

    @staticmethod
    async def wait(
        req: GatewayRequest, work: Coroutine[Any, Any, T], disconnected: Disconnected
    ) -> T:
        """``work`` until the client leaves or the request's own deadline passes."""
        if req.deadline is None:
            return await until_disconnect(work, disconnected)
        async with within(req.deadline, "waiting for an identical request's answer"):
            return await until_disconnect(work, disconnected)

    def finished(
        self, req: GatewayRequest, lookup: Lookup, flight: Flight, head: Head, follower: bool
    ) -> Reply:
        """The reply from the finished flight: its JSON body, or a replay of its answer."""
        headers = self.headers(req, head, follower)
        produced, replica = flight.produced, head.replica or None
        if not req.stream and produced is not None and produced.body is not None:
            body = restamped_json(produced.body) if follower else produced.body
            return Reply(lookup, replica, headers, JSON, body, produced=produced)
        answer = produced.answer if produced is not None else None
        if answer is None:  # nothing replayable: this request calls the replica itself
            raise FlightFailed(None, retry=True)
        headers["x-deja-entry"] = answer.entry_id
        if req.stream:
            body = replay_sse(answer, model=req.model, include_usage=req.include_usage)
            return Reply(lookup, replica, headers, SSE, body, produced=produced)
        body = replay_json(answer, model=req.model)
        return Reply(lookup, replica, headers, JSON, body, produced=produced)

    def streamed(
        self, req: GatewayRequest, lookup: Lookup, flight: Flight, head: Head, follower: bool
    ) -> Reply:
        """The reply that follows a streamed flight as its chunks arrive."""
        reply = Reply(lookup, head.replica, self.headers(req, head, follower), SSE)
        reply.stream = self.follow(req, flight, reply, follower)
        return reply

    async def follow(
        self, req: GatewayRequest, flight: Flight, reply: Reply, follower: bool
    ) -> AsyncGenerator[bytes, None]:
        hide = not follower and flight.head is not None and flight.head.hide_usage
        framer = Framer() if follower or hide else None
        fresh, created = fresh_id(req.endpoint), int(time.time())
        try:
            async with aclosing(flight.stream()) as chunks:
                async for raw in chunks:
                    out = raw if framer is None else framer.feed(raw)
                    if follower:
                        out = restamp(
                            out, id=fresh, created=created, include_usage=req.include_usage
                        )
                    elif hide:
                        out = without_usage(out)
                    if out:
                        yield out
            if hide and framer is not None and (rest := framer.flush()):
                yield rest
            reply.produced = flight.produced
        except FlightFailed as failed:
            error = failed.error or UpstreamError("the replica's answer was cut short")
            if not isinstance(error, ClientGoneError):
                yield stream_error_event(error, req.request_id)
        finally:
            self.flights.leave(flight)

    @staticmethod
    def headers(req: GatewayRequest, head: Head, follower: bool) -> dict[str, str]:
        headers = dict(head.headers)
        headers["x-request-id"] = req.request_id
        if follower:
            headers["x-deja-cache"] = Outcome.COALESCED.value
            for name in _LOOKUP_HEADERS:
                headers.pop(name, None)
        return headers
