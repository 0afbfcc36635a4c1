"""Steps 5-8 written once (middleware/produce.py), against simulated replicas over HTTP: the
``Call`` a miss makes, its ``Produced`` record (answer, client body, usage), the store it
triggers, and the ``Lookup.storable`` decision that governs both."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import orjson
import pytest

from deja.request import CachePolicy, GatewayRequest, Outcome
from middleware import sse
from middleware.lookup import Lookup
from middleware.produce import ProduceStep
from middleware.validate import validate
from sim.runner import SimCluster
from tests.support import SIM_MODEL


def request(question: str, *, stream: bool = False, write: bool = True) -> GatewayRequest:
    body: dict[str, Any] = {
        "model": SIM_MODEL,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 8,
    }
    if stream:
        body["stream"] = True
    return validate("chat", orjson.dumps(body), tenant="t", policy=CachePolicy(write=write))


@pytest.fixture
async def gateway(make_gateway: Any, sims: SimCluster) -> AsyncIterator[Any]:
    async with make_gateway(replicas=sims.urls) as (_, app):
        yield app.state.gateway


async def test_a_json_call_is_produced_at_once_counted_and_stored(gateway: Any) -> None:
    produce: ProduceStep = gateway.pipeline.produce_step
    req, entry = request(f"what is {uuid.uuid4()}?"), f"entry-{uuid.uuid4()}"
    call = await produce.produce(req, Lookup.miss(Outcome.MISS, entry, req))
    produced = call.produced
    assert produced is not None and not call.head.streamed
    assert call.head.replica == produced.replica and call.head.headers["x-deja-entry"] == entry
    assert produced.answer is not None and produced.answer.entry_id == entry
    assert produced.usage == orjson.loads(produced.body or b"")["usage"]
    await gateway.pipeline.drain()
    stored = await gateway.exact.get(entry)
    assert stored is not None and stored.message == produced.answer.message


async def test_an_unstorable_call_is_produced_but_never_stored(gateway: Any) -> None:
    produce: ProduceStep = gateway.pipeline.produce_step
    req, entry = request(f"what is {uuid.uuid4()}?", write=False), f"entry-{uuid.uuid4()}"
    call = await produce.produce(req, Lookup.miss(Outcome.MISS, entry, req))
    assert call.produced is not None and call.produced.answer is None
    assert call.produced.usage is not None  # still read (and counted) from the body
    await gateway.pipeline.drain()
    assert await gateway.exact.get(entry) is None


async def test_a_stream_is_produced_when_read_to_its_end(gateway: Any) -> None:
    produce: ProduceStep = gateway.pipeline.produce_step
    req, entry = request(f"stream {uuid.uuid4()}", stream=True), f"entry-{uuid.uuid4()}"
    call = await produce.produce(req, Lookup.miss(Outcome.MISS, entry, req))
    assert call.head.streamed and call.head.hide_usage  # asked for usage the client did not
    assert call.produced is None
    async with aclosing(call.chunks()) as chunks:
        raw = b"".join([chunk async for chunk in chunks])
    assert raw.endswith(sse.DONE) and sse.usage_of_stream(raw) is not None  # raw: usage kept
    produced = call.produced
    assert produced is not None and produced.body is None
    assert produced.answer is not None and produced.usage == produced.answer.usage
    await gateway.pipeline.drain()
    assert await gateway.exact.get(entry) is not None


async def test_the_direct_reply_hides_the_usage_it_asked_for(gateway: Any) -> None:
    produce: ProduceStep = gateway.pipeline.produce_step
    req = request(f"stream {uuid.uuid4()}", stream=True)
    lookup = Lookup.miss(Outcome.MISS, f"entry-{uuid.uuid4()}", req)

    async def never() -> None:
        await asyncio.Event().wait()

    reply = await produce.direct(req, lookup, never)
    assert reply.stream is not None and reply.produced is None
    async with aclosing(reply.stream) as stream:
        raw = b"".join([chunk async for chunk in stream])
    assert raw.endswith(sse.DONE) and not any(sse.is_usage_only(e) for e in sse.events(raw))
    assert reply.produced is not None and reply.produced.usage is not None
