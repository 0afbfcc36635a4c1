"""Admission control, deadlines and breakers over real sockets: simulated replicas saturated on
purpose, a real gateway, clients that wait, get refused, time out or send their body slowly."""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL

pytestmark = pytest.mark.integration

#: 10 tokens at 60 ms each: about 0.55 s per answer on a replica with a free slot.
SLOW = SimConfig(speed=1.0, base_ttft_ms=0, prefill_ms_per_token=0, decode_ms_per_token=60)


def body(stream: bool = False, max_tokens: int = 10) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"q {uuid.uuid4().hex}"}]
    return {"model": SIM_MODEL, "messages": messages, "stream": stream, "max_tokens": max_tokens}


@pytest.fixture
async def one_slow() -> AsyncIterator[SimCluster]:
    cluster = await start_simulators(1, SLOW.model_copy(update={"max_num_seqs": 2}))
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
async def two_fast() -> AsyncIterator[SimCluster]:
    cluster = await start_simulators(2, SimConfig(speed=0))
    try:
        yield cluster
    finally:
        await cluster.stop()


async def post(
    http: httpx.AsyncClient, url: str, payload: dict[str, Any]
) -> tuple[int, float, httpx.Response]:
    started = time.perf_counter()
    response = await http.post(url + "/v1/chat/completions", json=payload)
    return response.status_code, time.perf_counter() - started, response


async def test_beyond_capacity_requests_wait_then_429_and_a_full_queue_is_503_at_once(
    one_slow: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(
            replicas=[one_slow.urls[0] + ";max_inflight=2"],
            admission_queue_size=2,
            admission_max_wait_seconds=0.5,
        ) as (url, app),
        httpx.AsyncClient(timeout=10) as http,
    ):
        # the two admitted run ~1.8 s: longer than the others may wait (0.5 s)
        admitted = [asyncio.create_task(post(http, url, body(max_tokens=30))) for _ in range(2)]
        await asyncio.sleep(0.1)
        waiting = [asyncio.create_task(post(http, url, body())) for _ in range(2)]
        await asyncio.sleep(0.1)
        assert app.state.gateway.upstream.admission.waiting == 2
        refused = [await post(http, url, body()) for _ in range(2)]
        for status, seconds, response in refused:
            assert status == 503 and response.json()["error"]["code"] == "queue_full"
            assert int(response.headers["retry-after"]) >= 1
            assert seconds < 0.25  # refused without waiting (bench/admission.py times it)
        for status, seconds, response in await asyncio.gather(*waiting):
            assert status == 429 and response.json()["error"]["code"] == "overloaded"
            assert int(response.headers["retry-after"]) >= 1
            assert 0.45 < seconds < 1.5  # they waited for a slot, then gave up
        assert [s for s, _, _ in await asyncio.gather(*admitted)] == [200, 200]
        replica = app.state.gateway.pool.replicas[0]
        assert replica.in_flight == 0


async def test_waiting_requests_are_served_when_slots_free_and_the_replica_never_queues(
    one_slow: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=[one_slow.urls[0] + ";max_inflight=2"]) as (url, _),
        httpx.AsyncClient(timeout=10) as http,
    ):
        engine = one_slow.apps[0].state.sim.engine
        peak_held = 0

        async def watch() -> None:
            nonlocal peak_held
            while True:  # a new request waits for the next engine step: count both
                peak_held = max(peak_held, engine.waiting + engine.running)
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        results = await asyncio.gather(*(post(http, url, body()) for _ in range(6)))
        watcher.cancel()
        assert [s for s, _, _ in results] == [200] * 6
        times = sorted(t for _, t, _ in results)
        assert times[-1] > 2 * times[0]  # three rounds of two, served in turn
        assert peak_held <= 2  # the queueing happened in the gateway, not in the replica
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        assert (await client.chat.completions.create(**body())).choices[0].message.content


async def test_the_limit_is_learned_from_the_replicas_running_and_waiting(
    one_slow: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=one_slow.urls, admin_key="admin") as (url, app),
        httpx.AsyncClient(timeout=10) as http,
    ):
        gateway = app.state.gateway
        burst = [asyncio.create_task(post(http, url, body())) for _ in range(5)]
        await asyncio.sleep(0.2)  # 5 sent, the replica runs 2 (its max-num-seqs), 3 wait there
        await gateway.monitor.check_once()
        report = (
            await http.get(url + "/admin/replicas", headers={"authorization": "Bearer admin"})
        ).json()["replicas"][0]
        assert (report["max_num_seqs"], report["max_num_seqs_source"]) == (2, "learned")
        assert report["max_inflight"] == 3  # 2 + the headroom that lets it learn upwards
        metrics = (await http.get(url + "/metrics")).text
        assert 'deja_replica_max_inflight{replica="' in metrics
        await asyncio.gather(*burst)


async def test_overall_deadline_ends_a_stream_with_an_error_event_and_stores_nothing(
    one_slow: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(
            replicas=one_slow.urls, request_timeout_seconds=1.0, upstream_timeout_seconds=0.4
        ) as (url, app),
        httpx.AsyncClient(timeout=10) as http,
    ):
        # ~2.4 s of tokens, 60 ms apart: all 40 (vLLM's ignore_eos), since a short simulated
        # answer ended the stream before the deadline (1 run in 10)
        request = {**body(stream=True, max_tokens=40), "ignore_eos": True}
        started = time.monotonic()
        async with http.stream("POST", url + "/v1/chat/completions", json=request) as resp:
            assert resp.status_code == 200
            raw = b"".join([chunk async for chunk in resp.aiter_raw()])
        elapsed = time.monotonic() - started
        assert 0.9 < elapsed < 2.2  # the deadline, not the read timeout (chunks kept coming)
        events = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
        assert events[-1] == b"[DONE]"
        error = orjson.loads(events[-2])["error"]
        assert error["code"] == "deadline_exceeded"
        assert len(events) > 5  # real chunks came first
        await app.state.gateway.pipeline.drain()
        again = await http.post(url + "/v1/chat/completions", json={**request, "stream": False})
        assert again.status_code == 504  # asked of the replica again: the cut stream was not stored
        quick = body(stream=True, max_tokens=3)
        async with http.stream("POST", url + "/v1/chat/completions", json=quick) as resp:
            assert b"deadline" not in b"".join([c async for c in resp.aiter_raw()])
        await app.state.gateway.pipeline.drain()
        hit = await http.post(url + "/v1/chat/completions", json={**quick, "stream": False})
        assert hit.headers["x-deja-cache"] == "exact"  # a stream within its deadline is stored


async def test_overall_deadline_of_a_json_answer_is_504(
    one_slow: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=one_slow.urls, request_timeout_seconds=0.5) as (url, _),
        httpx.AsyncClient(timeout=10) as http,
    ):
        status, seconds, response = await post(http, url, body(max_tokens=40))
        assert status == 504 and response.json()["error"]["code"] == "deadline_exceeded"
        assert 0.45 < seconds < 1.8


async def raw_exchange(
    url: str, head: bytes, parts: list[bytes], pause: float
) -> tuple[bytes, float]:
    """Send ``head`` and ``parts`` (``pause`` apart) on a raw socket; the reply and its time."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    started = time.monotonic()
    writer.write(head)

    async def trickle() -> None:
        for part in parts:
            await asyncio.sleep(pause)
            writer.write(part)
            await writer.drain()

    sender = asyncio.create_task(trickle())
    try:  # read() returns at EOF: the server closed
        reply = await asyncio.wait_for(reader.read(), 5)
    except ConnectionResetError:  # closed while we were still writing: nothing left to read
        reply = b""
    elapsed = time.monotonic() - started
    sender.cancel()
    writer.close()
    return reply, elapsed


async def test_a_slow_or_short_body_gets_408_and_the_connection_is_closed(
    two_fast: SimCluster, make_gateway: Any
) -> None:
    async with make_gateway(
        replicas=two_fast.urls, body_read_timeout_seconds=0.5, admin_key="admin"
    ) as (url, _):
        payload = orjson.dumps(body())
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(payload)
        )
        short, elapsed = await raw_exchange(url, head + payload[:10], [], 0)
        assert short.startswith(b"HTTP/1.1 408 ") and b"connection: close" in short.lower()
        assert b'"request_timeout"' in short and 0.4 < elapsed < 2.0
        # a trickle keeps sending, but the whole body must arrive in time, not each piece
        pieces = [payload[i : i + 4] for i in range(0, len(payload), 4)]
        trickled, elapsed = await raw_exchange(url, head, pieces, 0.1)
        assert elapsed < 2.0 < 0.1 * len(pieces)  # closed long before the last piece
        assert trickled in (b"", trickled[:0] + trickled) and (
            not trickled or trickled.startswith(b"HTTP/1.1 408 ")
        )  # the 408, unless the close reset the socket under the sender first
        admin = b"PUT /admin/threshold HTTP/1.1\r\nhost: x\r\nauthorization: Bearer admin\r\n"
        admin += b"content-type: application/json\r\ncontent-length: 50\r\n\r\n{"
        slow_admin, _ = await raw_exchange(url, admin, [], 0)
        assert slow_admin.startswith(b"HTTP/1.1 408 ")
        async with httpx.AsyncClient() as http:  # whole bodies are unaffected
            assert (
                await http.post(url + "/v1/chat/completions", content=payload)
            ).status_code == 200


ADMIN = {"authorization": "Bearer adm"}


async def set_faults(cluster: SimCluster, **faults: Any) -> None:
    async with httpx.AsyncClient() as http:
        for sim in cluster.urls:
            (await http.put(sim + "/sim/faults", json=faults)).raise_for_status()


async def test_half_open_breakers_hold_requests_for_their_probe_instead_of_refusing_them(
    two_fast: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=two_fast.urls, replica_cooldown_seconds=0.5, admin_key="adm") as (
            url,
            _,
        ),
        httpx.AsyncClient(timeout=10, limits=httpx.Limits(max_connections=100)) as http,
    ):
        await set_faults(two_fast, error_rate=1.0, error_status=503)
        status, _, _ = await post(http, url, body())
        assert status == 502  # both replicas answered 503: both breakers are open now
        ready = await http.get(url + "/readyz", headers=ADMIN)  # the admin key: the details
        assert ready.status_code == 503  # not ready, and says why
        assert {r["breaker"] for r in ready.json()["replicas"].values()} == {"open"}
        assert all(r["healthy"] for r in ready.json()["replicas"].values())
        await set_faults(two_fast, error_rate=0.0)
        started = time.monotonic()
        results = await asyncio.gather(*(post(http, url, body()) for _ in range(80)))
        statuses = [s for s, _, _ in results]
        assert statuses == [200] * 80  # was: 2 probes through, 78 instant 503s
        assert time.monotonic() - started < 5.0  # they waited out the 0.5 s cooldown, no more
        ready = await http.get(url + "/readyz", headers=ADMIN)
        assert ready.status_code == 200
        states = ready.json()["replicas"].values()
        assert "closed" in {r["breaker"] for r in states}  # a probe succeeded and closed it
        assert all(r["available"] for r in states)  # the other waits for a probe, cooled down


async def test_a_stream_dropped_before_its_first_chunk_gives_its_slot_back(
    two_fast: SimCluster, make_gateway: Any
) -> None:
    async with make_gateway(replicas=[two_fast.urls[0] + ";max_inflight=1"]) as (_, app):
        upstream = app.state.gateway.upstream
        raw = orjson.dumps(body(stream=True))
        opened = await upstream.open_stream("/v1/chat/completions", raw, SIM_MODEL, None)
        replica = opened.replica
        assert replica.in_flight == 1
        del opened  # never iterated, never closed: what Starlette leaves when the client is gone
        gc.collect()
        assert replica.in_flight == 0
        again = await upstream.open_stream("/v1/chat/completions", raw, SIM_MODEL, None)
        again.close()  # the one slot was free again
