"""Single-flight's entry: join the running call for an entry id, or lead a new one.

The first identical miss leads: :meth:`FlightStep.publish` runs ``ProduceStep.produce`` (the one
copy of steps 5-8) in a task of its own and publishes what the call yields to the flight; every
request, the leader included, is a consumer (``middleware.flight.consume``). Across processes, a
short Redis lock per entry id (``deja.cache.flightlock``) makes one gateway call the replica
while the others poll the shared exact store for its answer (best effort: never longer than the
lock's TTL, and a Redis failure leads).
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import ExactStore
from deja.cache.flightlock import FlightLock
from deja.errors import CacheUnavailableError, ClientGoneError, DejaError
from deja.observability.metrics import Metrics
from deja.request import GatewayRequest, Outcome
from middleware.disconnect import Disconnected
from middleware.flight.consume import Consumer
from middleware.flight.table import Flight, FlightFailed, Flights
from middleware.lookup import Lookup, servable
from middleware.produce import Head, Produced, ProduceStep, Reply

#: How often a request waiting on another process's identical call looks for its answer.
REMOTE_POLL_SECONDS = 0.02


class FlightStep:
    """Identical concurrent misses share one replica call."""

    def __init__(
        self,
        produce_step: ProduceStep,
        flights: Flights,
        exact: ExactStore,
        metrics: Metrics,
        lock: FlightLock | None = None,
    ) -> None:
        self.produce_step = produce_step
        self.flights = flights
        self.exact = exact
        self.metrics = metrics
        self.lock = lock
        self.consumer = Consumer(flights)

    async def reply(self, req: GatewayRequest, lookup: Lookup, disconnected: Disconnected) -> Reply:
        """Join the running call for this entry id, or lead a new one. A follower whose
        flight failed before it sent anything tries again, and may lead the next one."""
        assert lookup.entry_id is not None
        while True:
            flight, leader = self.flights.join(lookup.entry_id)
            if leader:
                self.flights.start(flight, self.lead(req, lookup, flight))
            else:
                self.metrics.count(self.metrics.coalesced, "local")
            try:
                return await self.consumer.reply(
                    req, lookup, flight, leader=leader, disconnected=disconnected
                )
            except FlightFailed as failed:
                if not leader and failed.retry:
                    continue
                if failed.error is not None:
                    raise failed.error from None
                raise ClientGoneError("the client went away before the replica answered") from None

    async def lead(self, req: GatewayRequest, lookup: Lookup, flight: Flight) -> None:
        """The flight's producer, in its own task. Across processes, a Redis lock makes one
        gateway call the replica while the others wait for its stored answer."""
        assert lookup.entry_id is not None
        lock = self.lock
        if lock is not None and not await lock.acquire(lookup.entry_id):
            answer = await self.remote_answer(lookup.entry_id, lock)
            if answer is not None:
                self.share(flight, answer, "remote")
                return
        stored: asyncio.Task[None] | None = None
        try:
            # An identical call may have ended, and been stored, while this request was being
            # looked up (a slow semantic lookup under load): its answer, not a second call.
            answer = await self.stored_meanwhile(req, lookup.entry_id)
            if answer is not None:
                self.share(flight, answer, "stored")
                return
            stored = await self.publish(req, lookup, flight)
        except DejaError as exc:
            flight.fail(exc)
        finally:
            if lock is not None:
                # Held until the answer is in the shared store: a process polling for it
                # that saw the lock go first would call the replica a second time.
                if stored is not None:
                    await asyncio.wait({stored}, timeout=lock.ttl_ms / 1000)
                await lock.release(lookup.entry_id)

    async def publish(
        self, req: GatewayRequest, lookup: Lookup, flight: Flight
    ) -> asyncio.Task[None] | None:
        """Steps 5-8, once for the flight: what the call yields goes to every consumer.
        Returns the answer's background write (8), if one started."""
        call = await self.produce_step.produce(req, lookup)
        flight.open(call.head)
        if call.produced is None:
            async with aclosing(call.chunks()) as chunks:
                async for chunk in chunks:
                    flight.push(chunk)
        flight.finish(call.produced)
        return call.stored

    def share(self, flight: Flight, answer: CachedAnswer, where: str) -> None:
        """The flight is answered by another call's stored answer (``where`` it came from)."""
        self.metrics.count(self.metrics.coalesced, where)
        headers = {"x-deja-cache": Outcome.COALESCED.value, "x-deja-entry": answer.entry_id}
        flight.open(Head("", headers), remote=True)
        flight.finish(Produced("", answer, None, None))

    async def stored_meanwhile(self, req: GatewayRequest, entry_id: str) -> CachedAnswer | None:
        """The answer an identical call stored after this request's exact read, under that
        read's rule (``servable``); the entry id already carries whatever shaped the key. None
        on a store failure."""
        if not req.policy.read:  # no read at all, as in step 3
            return None
        try:
            return servable(req, await self.exact.get(entry_id))
        except CacheUnavailableError:
            return None

    async def remote_answer(self, entry_id: str, lock: FlightLock) -> CachedAnswer | None:
        """Another process leads: poll the shared exact store until its answer is there, or
        its lock is gone (it finished without a cacheable answer, or died). The lock is looked
        at before the store is read: the leader stores before it unlocks, so a read that
        follows a lock seen gone finds the answer if there is one."""
        while True:
            held = await lock.held(entry_id)
            try:
                answer = await self.exact.get(entry_id)
            except CacheUnavailableError:
                return None
            if answer is not None or not held:
                return answer
            await asyncio.sleep(REMOTE_POLL_SECONDS)
