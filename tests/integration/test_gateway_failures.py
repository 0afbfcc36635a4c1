"""Failure paths over real sockets: replica errors and stalls, dead replicas, Redis going away,
clients going away. The gateway degrades; it never hangs and never serves a wrong answer."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL, RedisServer, free_port

pytestmark = pytest.mark.integration


def body(stream: bool = False, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"q {uuid.uuid4().hex}"}]
    return {"model": SIM_MODEL, "messages": messages, "stream": stream, **extra}


@pytest.fixture
async def faulty() -> AsyncIterator[SimCluster]:
    cluster = await start_simulators(1, SimConfig(speed=0))
    try:
        yield cluster
    finally:
        await cluster.stop()


async def set_faults(cluster: SimCluster, **faults: Any) -> None:
    async with httpx.AsyncClient() as http:
        (await http.put(cluster.urls[0] + "/sim/faults", json=faults)).raise_for_status()


async def test_replica_500_becomes_openai_shaped_502(faulty: SimCluster, make_gateway: Any) -> None:
    async with make_gateway(replicas=faulty.urls) as (url, _):
        await set_faults(faulty, error_rate=1.0, error_status=500)
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(**body())
        assert info.value.status_code == 502
        assert info.value.code == "upstream_server_error"
        assert "injected" in info.value.message  # the replica's own message travels
        with pytest.raises(openai.InternalServerError) as streamed:
            await client.chat.completions.create(**body(stream=True))
        assert streamed.value.status_code == 502


async def test_replica_4xx_passes_through(faulty: SimCluster, make_gateway: Any) -> None:
    async with make_gateway(replicas=faulty.urls) as (url, _):
        await set_faults(faulty, error_rate=1.0, error_status=429)
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(**body())


async def test_stalled_replica_gives_504(faulty: SimCluster, make_gateway: Any) -> None:
    async with make_gateway(replicas=faulty.urls, upstream_timeout_seconds=0.3) as (url, _):
        await set_faults(faulty, stall_ms=3000)
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(**body())
        assert info.value.status_code == 504 and info.value.code == "upstream_timeout"
        assert time.monotonic() - started < 2.5


async def test_no_reachable_replica_gives_503(make_gateway: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with make_gateway(replicas=[dead]) as (url, _):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(**body())
        assert info.value.status_code == 503
        async with httpx.AsyncClient() as http:
            assert (await http.get(url + "/readyz")).status_code == 503


async def test_dead_replica_is_skipped_for_a_live_one(sims: SimCluster, make_gateway: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with make_gateway(replicas=[dead, sims.urls[0]]) as (url, _):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        for _ in range(4):
            raw = await client.chat.completions.with_raw_response.create(**body())
            assert raw.headers["x-deja-replica"] == sims.urls[0].split("//")[1]


async def test_redis_stopped_mid_run_serves_then_resumes_caching(
    sims: SimCluster, make_gateway: Any
) -> None:
    redis = RedisServer()
    redis.start()
    try:
        async with make_gateway(
            replicas=sims.urls,
            redis_url=redis.url,
            redis_timeout_seconds=0.2,
            redis_retry_seconds=0.2,
            admin_key="admin",
        ) as (url, app):
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
            admin = {"authorization": "Bearer admin"}

            async def outcome(request: dict[str, Any]) -> str:
                raw = await client.chat.completions.with_raw_response.create(**request)
                assert raw.parse().choices[0].message.content
                return raw.headers["x-deja-cache"]

            async def settled_outcome(request: dict[str, Any]) -> str:
                await app.state.gateway.pipeline.drain()  # the store runs after the response
                return await outcome(request)

            cached = body()
            assert await outcome(cached) == "miss"
            assert await settled_outcome(cached) == "exact"
            redis.stop()
            # The local tier (redis_client_cache) answers until its invalidation subscription
            # is known to be lost; from then on, with Redis down, nothing is served from cache.
            tracking = app.state.gateway.exact.store.tracking
            for _ in range(300):
                if not tracking.live:
                    break
                await asyncio.sleep(0.01)
            assert await outcome(cached) == "off"
            fresh = body()
            assert await outcome(fresh) == "off"
            assert await outcome(body(stream=False)) == "off"
            async with httpx.AsyncClient(base_url=url, headers=admin) as http:
                listing = await http.get("/admin/cache/entries")
                theta = await http.put("/admin/threshold", json={"global": 0.9})
            # A store outage is the gateway's dependency failing (503), not a bad request.
            assert (listing.status_code, theta.status_code) == (503, 503)
            assert listing.json()["error"]["code"] == "dependency_unavailable"
            redis.start()
            await asyncio.sleep(0.3)
            again = body()
            assert await outcome(again) == "miss"
            assert await settled_outcome(again) == "exact"
    finally:
        redis.stop()


async def _running(sim_url: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(sim_url + "/metrics")).text
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no running gauge")


@pytest.fixture
async def slow() -> AsyncIterator[SimCluster]:
    cluster = await start_simulators(1, SimConfig(speed=1.0, decode_ms_per_token=100))
    try:
        yield cluster
    finally:
        await cluster.stop()


async def test_stream_relays_first_bytes_before_the_replica_finishes(
    slow: SimCluster, make_gateway: Any
) -> None:
    async with make_gateway(replicas=slow.urls) as (url, _), httpx.AsyncClient() as http:
        started = time.monotonic()
        async with http.stream("POST", url + "/v1/chat/completions", json=body(True)) as resp:
            iterator = resp.aiter_raw()
            first = await anext(iterator)
            first_at = time.monotonic() - started
            async for _ in iterator:
                pass
            total = time.monotonic() - started
        assert first.startswith(b"data: ")
        assert total > 1.0  # at least 12 tokens x 100 ms
        assert first_at < total / 3


async def test_client_disconnect_mid_stream_stores_nothing_and_cancels(
    slow: SimCluster, make_gateway: Any
) -> None:
    async with make_gateway(replicas=slow.urls) as (url, app), httpx.AsyncClient() as http:
        request = body(True)
        async with http.stream("POST", url + "/v1/chat/completions", json=request) as resp:
            await anext(resp.aiter_raw())
        # the client has gone; the replica must stop generating soon
        await asyncio.sleep(0.3)
        assert await _running(slow.urls[0]) == 0
        await app.state.gateway.pipeline.drain()
        again = await http.post(url + "/v1/chat/completions", json={**request, "stream": False})
        assert again.headers["x-deja-cache"] == "miss"


async def test_client_disconnect_before_json_answer_cancels_upstream(
    slow: SimCluster, make_gateway: Any
) -> None:
    async with make_gateway(replicas=slow.urls) as (url, app):
        request = body(False)
        async with httpx.AsyncClient(timeout=0.2) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.post(url + "/v1/chat/completions", json=request)
        await asyncio.sleep(0.3)
        assert await _running(slow.urls[0]) == 0
        await app.state.gateway.pipeline.drain()
        async with httpx.AsyncClient() as http:
            again = await http.post(url + "/v1/chat/completions", json=request)
        assert again.headers["x-deja-cache"] == "miss"


async def test_readyz_stays_ready_through_a_cache_outage(
    sims: SimCluster, make_gateway: Any
) -> None:
    """Issue 19 (6): /readyz means "send me traffic". With Redis unreachable requests are still
    answered (``off``), so the pod stays in the Service; the outage is in the body."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with (
        make_gateway(replicas=sims.urls, redis_url=dead, redis_timeout_seconds=0.2) as (url, _),
        httpx.AsyncClient(base_url=url) as http,
    ):
        ready = await http.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "ready"
        assert ready.json()["exact"] == {"store": "redis", "ok": False}
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        raw = await client.chat.completions.with_raw_response.create(**body())
        assert raw.headers["x-deja-cache"] == "off"
