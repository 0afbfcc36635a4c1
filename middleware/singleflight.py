"""Single-flight: identical concurrent misses make one upstream call.

Requests with the same entry id (the exact cache key) that miss while an upstream call for that
id is running join it as *followers* instead of calling a replica themselves. 50 identical
first-time requests sent at once used to reach the replicas 29 times (JSON) and 45 times
(streamed); with flights they reach them once.

The upstream call runs in a task of its own (the *producer*), not in the first client's
request, so that client going away does not take the answer from the others: the producer is
cancelled only when no one is left waiting for it. Every consumer reads the flight:

- a JSON request waits for the finished answer;
- a streamed request gets the replica's events as they arrive (fan-out), re-stamped with its own
  ``id`` and ``created``, without the usage event unless it asked for usage.

A flight that fails before a follower has sent anything makes that follower retry (one of them
becomes the next leader); a replica's 4xx is the same for everyone and is shared instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

import orjson

from deja.cache.entry import CachedAnswer
from deja.errors import DejaError, UpstreamClientError
from middleware.relay import iter_sse_data
from middleware.replay import fresh_id

_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Opened:
    """Where the producer's call went; the consumers' response headers come from it."""

    replica: str
    headers: dict[str, str]
    #: The replica streams its answer: streamed consumers can follow it as it arrives.
    streamed: bool = False
    #: Another process answered (found in the shared exact store): every consumer follows.
    remote: bool = False


class FlightFailed(Exception):
    """The flight ended without an answer; ``retry`` says whether a follower should try
    again itself (and ``error`` what to raise when it should not)."""

    def __init__(self, error: DejaError | None, *, retry: bool) -> None:
        super().__init__(str(error) if error else "the shared upstream call was cancelled")
        self.error = error
        self.retry = retry


class Flight:
    """One shared upstream call: its raw chunks (streams), its answer, its end."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.chunks: list[bytes] = []
        self.body: bytes | None = None
        self.answer: CachedAnswer | None = None
        self.opened: Opened | None = None
        self.failure: FlightFailed | None = None
        self.done = False
        self.consumers = 0
        self.followers = 0
        self.task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    # --- the producer's side -------------------------------------------------------------
    def open(self, opened: Opened) -> None:
        self.opened = opened
        self._wake()

    def push(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self._wake()

    def finish(self, answer: CachedAnswer | None, body: bytes | None = None) -> None:
        self.answer, self.body, self.done = answer, body, True
        self._wake()

    def fail(self, error: DejaError | None) -> None:
        if self.done:
            return
        retry = not isinstance(error, UpstreamClientError)
        self.failure, self.done = FlightFailed(error, retry=retry), True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # --- the consumers' side --------------------------------------------------------------
    async def changed(self) -> None:
        await self._changed.wait()

    async def wait_opened(self) -> Opened:
        """The producer's replica once the call is under way (raises if it failed first)."""
        while self.opened is None:
            if self.failure is not None:
                raise self.failure
            await self.changed()
        return self.opened

    async def wait_done(self) -> None:
        while not self.done:
            await self.changed()
        if self.failure is not None:
            raise self.failure

    async def stream(self) -> AsyncIterator[bytes]:
        """The raw chunks from the first, as they arrive; raises FlightFailed at a failure."""
        sent = 0
        while True:
            while sent < len(self.chunks):
                sent += 1
                yield self.chunks[sent - 1]
            if self.done:
                if self.failure is not None:
                    raise self.failure
                return
            await self.changed()


class Flights:
    """The flights in progress in this process, by entry id."""

    def __init__(self) -> None:
        self._flights: dict[str, Flight] = {}
        self.coalesced = 0

    def __len__(self) -> int:
        return len(self._flights)

    def join(self, key: str) -> tuple[Flight, bool]:
        """The flight for ``key`` and True when the caller leads it (a new flight)."""
        flight = self._flights.get(key)
        if flight is not None and not flight.done:
            flight.followers += 1
            self.coalesced += 1
            return flight, False
        flight = self._flights[key] = Flight(key)
        return flight, True

    def start(self, flight: Flight, producer: Coroutine[Any, Any, None]) -> None:
        """Run the producer; the flight leaves the table when it ends, however it ends."""
        flight.task = asyncio.get_running_loop().create_task(producer)
        flight.task.add_done_callback(lambda task: self._ended(flight, task))

    def _ended(self, flight: Flight, task: asyncio.Task[None]) -> None:
        if not flight.done:  # cancelled, or a bug the producer did not turn into fail()
            error = None if task.cancelled() else task.exception()
            flight.fail(error if isinstance(error, DejaError) else None)
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]

    def leave(self, flight: Flight) -> None:
        """A consumer is done (answered, or its client went away); the last one to leave a
        running flight cancels its producer: nobody is waiting for that answer any more."""
        flight.consumers -= 1
        if flight.consumers <= 0 and not flight.done and flight.task is not None:
            flight.task.cancel()

    async def close(self) -> None:
        """Cancel every producer (shutdown)."""
        tasks = [f.task for f in self._flights.values() if f.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Restamp:
    """A follower's copy of a relayed stream: its own ``id`` and ``created`` on every event,
    and the usage-only event dropped unless it asked for usage. Events are cut at blank
    lines; a partial event waits for its remainder."""

    def __init__(self, endpoint: str, *, include_usage: bool) -> None:
        self.id = fresh_id(endpoint)
        self.created = int(time.time())
        self.include_usage = include_usage
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._pending = data
            return b""
        self._pending = data[cut + 2 :]
        return b"".join(self._event(e) for e in data[:cut].split(b"\n\n"))

    def _event(self, event: bytes) -> bytes:
        payloads = iter_sse_data(event + b"\n\n")
        if len(payloads) != 1:
            return event + b"\n\n" if event.strip() else b""
        if payloads[0].strip() == b"[DONE]":
            return _DONE
        try:
            chunk = orjson.loads(payloads[0])
        except orjson.JSONDecodeError:
            return event + b"\n\n"
        if not isinstance(chunk, dict):
            return event + b"\n\n"
        if chunk.get("choices") == [] and chunk.get("usage") and not self.include_usage:
            return b""
        if "id" in chunk:
            chunk["id"] = self.id
        if "created" in chunk:
            chunk["created"] = self.created
        return b"data: " + orjson.dumps(chunk) + b"\n\n"
