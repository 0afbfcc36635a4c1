"""Single-flight through a real gateway and a slow simulated replica: identical concurrent
misses make one upstream call; followers of a stream receive it as it is generated, with their
own ids; a leader that fails or whose client leaves does not take the followers down."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from deja.redisclient import connect_redis
from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL

pytestmark = pytest.mark.integration


@pytest.fixture
async def slow() -> AsyncIterator[SimCluster]:
    """One replica whose every answer takes about a second: 50 requests all arrive while the
    first is still being answered, even on a busy machine."""
    config = SimConfig(speed=1, added_latency_ms=1000, decode_ms_per_token=10)
    cluster = await start_simulators(1, config)
    try:
        yield cluster
    finally:
        await cluster.stop()


async def set_faults(cluster: SimCluster, **faults: Any) -> None:
    async with httpx.AsyncClient() as http:
        (await http.put(cluster.urls[0] + "/sim/faults", json=faults)).raise_for_status()


def body(question: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": question}]
    return {"model": SIM_MODEL, "messages": messages, "max_tokens": 24, **extra}


async def upstream_calls(http: httpx.AsyncClient) -> float:
    text = (await http.get("/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("deja_upstream_requests_total{")
    )


async def test_fifty_identical_json_misses_make_one_upstream_call(
    slow: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=slow.urls) as (url, _),
        httpx.AsyncClient(
            base_url=url, timeout=30, limits=httpx.Limits(max_connections=64)
        ) as http,
    ):
        question = body(f"coalesce {uuid.uuid4().hex}")
        replies = await asyncio.gather(
            *(http.post("/v1/chat/completions", json=question) for _ in range(50))
        )
        assert [r.status_code for r in replies] == [200] * 50
        outcomes = sorted(r.headers["x-deja-cache"] for r in replies)
        assert outcomes == ["coalesced"] * 49 + ["miss"]
        answers = [r.json() for r in replies]
        assert len({a["choices"][0]["message"]["content"] for a in answers}) == 1
        assert len({a["id"] for a in answers}) == 50  # each its own id
        assert await upstream_calls(http) == 1
        metrics = (await http.get("/metrics")).text
        assert 'deja_coalesced_total{where="local"} 49.0' in metrics
        # Each follower is recorded as coalesced (metrics, access log, its trace), not as a miss.
        counted = {
            line.split('cache="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("deja_requests_total{") and 'route="chat"' in line
        }
        assert counted == {"coalesced": 49.0, "miss": 1.0}


async def read_stream(http: httpx.AsyncClient, payload: dict[str, Any]) -> dict[str, Any]:
    """A streamed answer: its chunks' ids, its text, its outcome, when its first and last
    events arrived."""
    ids, text, first, last = set(), "", None, 0.0
    async with http.stream("POST", "/v1/chat/completions", json=payload) as reply:
        outcome = reply.headers["x-deja-cache"]
        async for line in reply.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = orjson.loads(line[6:])
            first = first or time.perf_counter()
            last = time.perf_counter()
            ids.add(chunk["id"])
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
    return {"ids": ids, "text": text, "outcome": outcome, "first": first, "last": last}


async def test_followers_of_a_stream_get_it_as_it_is_generated(
    slow: SimCluster, make_gateway: Any
) -> None:
    await set_faults(slow, added_latency_ms=300)
    async with (
        make_gateway(replicas=slow.urls) as (url, _),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        # ignore_eos: exactly 60 tokens (the simulator's own answers are 16-44 tokens long, by
        # the prompt's digest: a short one made the spans below short too, a flake)
        payload = body(f"stream {uuid.uuid4().hex}", stream=True, max_tokens=60, ignore_eos=True)
        streams = await asyncio.gather(*(read_stream(http, payload) for _ in range(10)))
        assert sorted(s["outcome"] for s in streams) == ["coalesced"] * 9 + ["miss"]
        assert len({s["text"] for s in streams}) == 1 and streams[0]["text"]
        all_ids = [s["ids"] for s in streams]
        assert all(len(ids) == 1 for ids in all_ids)  # one id per stream, its own
        assert len(set().union(*all_ids)) == 10
        # 60 tokens at 10 ms each: the followers' first events came well before their last
        # (a follower that joined late still waits for the tokens not generated yet)
        spans = sorted(s["last"] - s["first"] for s in streams if s["outcome"] == "coalesced")
        assert spans[len(spans) // 2] > 0.2
        assert await upstream_calls(http) == 1


async def test_a_failed_leader_hands_over_to_a_follower(
    slow: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=slow.urls) as (url, _),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        await set_faults(slow, added_latency_ms=600, error_rate=1.0, error_status=500)
        question = body(f"fails {uuid.uuid4().hex}")
        leader = asyncio.create_task(http.post("/v1/chat/completions", json=question))
        await asyncio.sleep(0.2)
        await set_faults(slow, added_latency_ms=300, error_rate=0.0)  # later calls succeed
        followers = await asyncio.gather(
            *(http.post("/v1/chat/completions", json=question) for _ in range(5))
        )
        assert (await leader).status_code == 502
        assert [r.status_code for r in followers] == [200] * 5
        assert sorted(r.headers["x-deja-cache"] for r in followers) == ["coalesced"] * 4 + ["miss"]


async def test_a_leader_whose_client_leaves_still_answers_the_followers(
    slow: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=slow.urls) as (url, _),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        question = body(f"leaves {uuid.uuid4().hex}")
        async with httpx.AsyncClient(base_url=url, timeout=0.3) as impatient:
            leader = asyncio.create_task(impatient.post("/v1/chat/completions", json=question))
            await asyncio.sleep(0.1)
            followers = asyncio.gather(
                *(http.post("/v1/chat/completions", json=question) for _ in range(5))
            )
            with pytest.raises(httpx.ReadTimeout):
                await leader
        replies = await followers
        assert [r.status_code for r in replies] == [200] * 5
        assert await upstream_calls(http) == 1


async def test_two_gateways_sharing_redis_make_one_upstream_call(
    slow: SimCluster, make_gateway: Any, redis_url: str
) -> None:
    async with (
        # 2 s per Redis operation: this checks the coalescing, not Redis's latency under load.
        make_gateway(replicas=slow.urls, redis_url=redis_url, redis_timeout_seconds=2.0) as (
            one,
            _,
        ),
        make_gateway(replicas=slow.urls, redis_url=redis_url, redis_timeout_seconds=2.0) as (
            two,
            _,
        ),
        httpx.AsyncClient(timeout=30) as http,
    ):
        question = body(f"two gateways {uuid.uuid4().hex}")
        first = asyncio.create_task(http.post(one + "/v1/chat/completions", json=question))
        redis = connect_redis(redis_url, timeout=1.0)  # one node, or every master of a cluster
        try:  # wait until gateway one holds the lock (it then calls the replica)
            for _ in range(500):
                if [k async for k in redis.scan_iter("deja:flight:*")]:
                    break
                await asyncio.sleep(0.01)
        finally:
            await redis.aclose()
        others = await asyncio.gather(
            *(http.post(url + "/v1/chat/completions", json=question) for url in [one, two] * 5)
        )
        assert (await first).headers["x-deja-cache"] == "miss"
        assert {r.headers["x-deja-cache"] for r in others} == {"coalesced"}
        texts = {r.json()["choices"][0]["message"]["content"] for r in [*others, await first]}
        assert len(texts) == 1
        calls = 0.0
        for url in (one, two):
            http.base_url = httpx.URL(url)
            calls += await upstream_calls(http)
        assert calls == 1
        remote = (await http.get(two + "/metrics")).text
        assert 'deja_coalesced_total{where="remote"} 1.0' in remote
