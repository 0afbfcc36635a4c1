"""The single-flight table: one :class:`Flight` per entry id while its replica call runs.

A flight is what a producer publishes and its consumers read: the call's :class:`Head` once it
is under way, a stream's raw chunks as they arrive, the :class:`Produced` record at the end,
or the failure. The producer runs in a task of its own (``Flights.start``), not in the first
client's request, so that client going away does not take the answer from the others: it is
cancelled only when the last consumer leaves (``Flights.leave``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Coroutine
from typing import Any

from deja.errors import DejaError, UpstreamClientError
from middleware.produce import Head, Produced


class FlightFailed(Exception):
    """The flight ended without an answer; ``retry`` says whether a follower should try
    again itself (and ``error`` what to raise when it should not)."""

    def __init__(self, error: DejaError | None, *, retry: bool) -> None:
        super().__init__(str(error) if error else "the shared upstream call was cancelled")
        self.error = error
        self.retry = retry


class Flight:
    """One shared replica call: its head, its raw chunks (streams), its record, its end."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.head: Head | None = None
        #: Another process answered (found in the shared exact store): every consumer follows.
        self.remote = False
        self.chunks: list[bytes] = []
        self.produced: Produced | None = None
        self.failure: FlightFailed | None = None
        self.done = False
        self.consumers = 0
        self.task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    # --- the producer's side -------------------------------------------------------------
    def open(self, head: Head, *, remote: bool = False) -> None:
        self.head, self.remote = head, remote
        self._wake()

    def push(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self._wake()

    def finish(self, produced: Produced | None) -> None:
        self.produced, self.done = produced, True
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

    async def wait_opened(self) -> Head:
        """The call's head once it is under way (raises if it failed first)."""
        while self.head is None:
            if self.failure is not None:
                raise self.failure
            await self.changed()
        return self.head

    async def wait_done(self) -> None:
        while not self.done:
            await self.changed()
        if self.failure is not None:
            raise self.failure

    async def stream(self) -> AsyncGenerator[bytes, None]:
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

    def __len__(self) -> int:
        return len(self._flights)

    def join(self, key: str) -> tuple[Flight, bool]:
        """The flight for ``key`` and True when the caller leads it (a new flight)."""
        flight = self._flights.get(key)
        if flight is not None and not flight.done:
            return flight, False
        flight = self._flights[key] = Flight(key)
        return flight, True

    def start(self, flight: Flight, producer: Coroutine[Any, Any, None]) -> None:
        """Run the producer; the flight leaves the table when it ends, however it ends."""
        flight.task = asyncio.get_running_loop().create_task(producer)
        flight.task.add_done_callback(lambda task: self.ended(flight, task))

    def ended(self, flight: Flight, task: asyncio.Task[None]) -> None:
        """The producer's task is over: a flight it did not finish fails (cancelled, or a bug
        the producer did not turn into ``fail``), and leaves the table."""
        if not flight.done:
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
