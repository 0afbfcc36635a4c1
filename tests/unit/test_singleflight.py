"""Single-flight without I/O: joining, fan-out of a stream as it arrives, failure and retry,
cancellation when the last consumer leaves, and the follower's re-stamped events."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from deja.errors import UpstreamClientError, UpstreamServerError
from middleware.singleflight import Flight, FlightFailed, Flights, Opened, Restamp


def event(payload: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def test_the_first_leads_the_rest_follow_until_it_ends() -> None:
    flights = Flights()
    leader, leads = flights.join("k")
    follower, follows = flights.join("k")
    assert leads and not follows and follower is leader and flights.coalesced == 1
    other, leads_other = flights.join("other")
    assert leads_other and other is not leader

    async def produce() -> None:
        leader.open(Opened("r1", {}))
        leader.finish(None, b"{}")

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
        flight.finish(None, b"done")

    flights.start(flight, produce())
    flight.consumers = 2
    flights.leave(flight)  # the leader's client went away
    go.set()
    await flight.wait_done()
    flights.leave(flight)
    assert flight.body == b"done"


def test_restamp_gives_each_follower_its_own_id_and_hides_usage() -> None:
    stream = (
        event({"id": "chatcmpl-1", "created": 1, "choices": [{"delta": {"content": "hi"}}]})
        + event({"id": "chatcmpl-1", "created": 1, "choices": [], "usage": {"total_tokens": 3}})
        + b"data: [DONE]\n\n"
    )
    one, two = Restamp("chat", include_usage=False), Restamp("chat", include_usage=True)
    # fed in awkward pieces: events are only emitted whole
    out_one = b"".join(one.feed(stream[i : i + 7]) for i in range(0, len(stream), 7))
    out_two = two.feed(stream)
    first = orjson.loads(out_one.split(b"\n\n")[0][6:])
    assert first["id"] == one.id != "chatcmpl-1" and first["choices"][0]["delta"]["content"] == "hi"
    assert b"usage" not in out_one and out_one.endswith(b"data: [DONE]\n\n")
    assert b"usage" in out_two and one.id != two.id
