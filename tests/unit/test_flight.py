"""Single-flight's table without I/O: joining, fan-out of a stream as it arrives, failure and
retry, cancellation when the last consumer leaves (re-stamping is in test_sse.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest

from deja.cache.entry import CachedAnswer
from deja.errors import CacheUnavailableError, UpstreamClientError, UpstreamServerError
from deja.request import CachePolicy, Outcome
from middleware.flight import Flight, FlightFailed, Flights
from middleware.flight.lead import FlightStep
from middleware.lookup import Lookup
from middleware.produce import Call, Head, Produced


async def test_the_first_leads_the_rest_follow_until_it_ends() -> None:
    flights = Flights()
    leader, leads = flights.join("k")
    follower, follows = flights.join("k")
    assert leads and not follows and follower is leader
    other, leads_other = flights.join("other")
    assert leads_other and other is not leader

    async def produce() -> None:
        leader.open(Head("r1", {}))
        leader.finish(Produced("r1", None, b"{}", None))

    flights.start(leader, produce())
    await leader.wait_done()
    await asyncio.sleep(0)
    _, leads_again = flights.join("k")
    assert leads_again  # a finished flight is never joined


async def test_followers_get_chunks_as_they_arrive() -> None:
    flight = Flight("k")
    got: list[bytes] = []
    release = asyncio.Event()

    async def follow() -> None:
        async for chunk in flight.stream():
            got.append(chunk)
            if len(got) == 1:
                release.set()

    consumer = asyncio.create_task(follow())
    flight.push(b"a")
    await asyncio.wait_for(release.wait(), 1)
    assert got == [b"a"]  # the first chunk arrived before the stream ended
    flight.push(b"b")
    flight.finish(None)
    await asyncio.wait_for(consumer, 1)
    assert got == [b"a", b"b"]


async def test_a_failure_says_whether_to_retry() -> None:
    server = Flight("k")
    server.fail(UpstreamServerError("boom", replica_status=500))
    with pytest.raises(FlightFailed) as info:
        await server.wait_done()
    assert info.value.retry

    client = Flight("k")
    client.fail(UpstreamClientError(400, {"error": {"message": "bad"}}, {}))
    with pytest.raises(FlightFailed) as info:
        await client.wait_opened()
    assert not info.value.retry and isinstance(info.value.error, UpstreamClientError)


async def test_the_last_consumer_leaving_cancels_the_producer() -> None:
    flights = Flights()
    flight, _ = flights.join("k")
    started = asyncio.Event()

    async def produce() -> None:
        started.set()
        await asyncio.sleep(60)

    flights.start(flight, produce())
    await started.wait()
    flight.consumers = 2
    flights.leave(flight)
    flights.leave(flight)
    assert flight.task is not None
    with pytest.raises(asyncio.CancelledError):
        await flight.task
    assert flight.done and flight.failure is not None and flight.failure.retry
    assert len(flights) == 0


async def test_a_consumer_leaving_while_another_waits_keeps_the_producer() -> None:
    flights = Flights()
    flight, _ = flights.join("k")
    go = asyncio.Event()

    async def produce() -> None:
        await go.wait()
        flight.finish(Produced("r", None, b"done", None))

    flights.start(flight, produce())
    flight.consumers = 2
    flights.leave(flight)  # the leader's client went away
    go.set()
    await flight.wait_done()
    flights.leave(flight)
    assert flight.produced is not None and flight.produced.body == b"done"


async def test_the_cross_process_lock_is_held_until_the_answer_is_stored() -> None:
    """A process polling for the leader's answer gives up when the lock goes: released before
    the background write lands, it would call the replica a second time (seen under load with
    two gateways on one Redis)."""
    events: list[str] = []

    async def write() -> None:
        await asyncio.sleep(0.2)
        events.append("stored")

    class Producer:
        async def produce(self, req: object, lookup: object) -> Call:
            call = Call(Head("r1", {}), Produced("r1", None, b"{}", None))
            call.stored = asyncio.get_running_loop().create_task(write())
            return call

    class Lock:
        ttl_ms = 30_000

        async def acquire(self, entry_id: str) -> bool:
            return True

        async def release(self, entry_id: str) -> None:
            events.append("released")

    class Empty:
        async def get(self, entry_id: str) -> None:
            return None

    step = FlightStep(
        cast(Any, Producer()), Flights(), cast(Any, Empty()), cast(Any, None), cast(Any, Lock())
    )
    flight = Flight("k")
    await step.lead(cast(Any, Request(CachePolicy())), Lookup(Outcome.MISS, "k"), flight)
    assert events == ["stored", "released"]


class Request:
    """What the leader reads of a request before it produces: its cache policy."""

    def __init__(self, policy: CachePolicy) -> None:
        self.policy = policy


class Counts:
    def __init__(self) -> None:
        self.coalesced = "coalesced"
        self.counted: list[tuple[str, str]] = []

    def count(self, counter: str, label: str) -> None:
        self.counted.append((counter, label))


def stored(age: float) -> CachedAnswer:
    return CachedAnswer("k", "chat", "m", "stop", time.time() - age, message={"content": "x"})


class Producer:
    """Counts the replica calls a leader makes."""

    calls = 0

    async def produce(self, req: object, lookup: object) -> Call:
        Producer.calls += 1
        return Call(Head("r1", {}), Produced("r1", None, b"{}", None))


async def lead_with_stored(answer: CachedAnswer | None, policy: CachePolicy) -> tuple[int, Flight]:
    """A leader whose exact read missed, while an identical call stored ``answer`` meanwhile."""

    class Exact:
        async def get(self, entry_id: str) -> CachedAnswer | None:
            if answer is None:
                raise CacheUnavailableError("down")
            return answer

    Producer.calls = 0
    metrics = Counts()
    step = FlightStep(cast(Any, Producer()), Flights(), cast(Any, Exact()), cast(Any, metrics))
    flight = Flight("k")
    await step.lead(cast(Any, Request(policy)), Lookup(Outcome.MISS, "k"), flight)
    return Producer.calls, flight


async def test_a_leader_serves_an_identical_call_stored_during_its_lookup() -> None:
    """A request whose lookup was slow reaches single-flight after the identical call has
    ended and stored its answer: it shares that answer rather than calling the replica again
    (seen as a second upstream call with two gateways on a loaded machine)."""
    answer = stored(age=1)
    calls, flight = await lead_with_stored(answer, CachePolicy())
    assert calls == 0
    assert flight.produced is not None and flight.produced.answer is answer


@pytest.mark.parametrize(
    ("policy", "age"),
    [
        (CachePolicy(read=False), 1.0),  # Cache-Control: no-cache reads nothing
        (CachePolicy(max_age=5), 60.0),  # too old for this request's max-age
    ],
)
async def test_a_leader_calls_the_replica_when_its_rules_refuse_the_stored_answer(
    policy: CachePolicy, age: float
) -> None:
    calls, flight = await lead_with_stored(stored(age), policy)
    assert calls == 1
    assert flight.produced is not None and flight.produced.answer is None


async def test_a_leader_calls_the_replica_when_the_store_fails() -> None:
    calls, _ = await lead_with_stored(None, CachePolicy())
    assert calls == 1


async def test_a_poller_that_sees_the_lock_gone_still_finds_an_answer_stored_before_it() -> None:
    # The other process stores its answer and unlocks between this poller's read of the store
    # and its look at the lock: the poller must serve that answer, not lead a second call.
    answer = cast(Any, object())
    state = {"stored": False, "locked": True}

    class Exact:
        async def get(self, entry_id: str) -> object:
            found = answer if state["stored"] else None
            state["stored"], state["locked"] = True, False  # meanwhile: stored, then unlocked
            return found

    class Lock:
        async def held(self, entry_id: str) -> bool:
            return bool(state["locked"])

    step = FlightStep(cast(Any, None), Flights(), cast(Any, Exact()), cast(Any, None))
    assert await step.remote_answer("k", cast(Any, Lock())) is answer


async def test_a_poller_gives_up_when_the_lock_goes_without_an_answer() -> None:
    class Exact:
        async def get(self, entry_id: str) -> None:
            return None

    class Lock:
        calls = 0

        async def held(self, entry_id: str) -> bool:
            Lock.calls += 1
            return Lock.calls < 3

    step = FlightStep(cast(Any, None), Flights(), cast(Any, Exact()), cast(Any, None))
    assert await step.remote_answer("k", cast(Any, Lock())) is None
    assert Lock.calls == 3
