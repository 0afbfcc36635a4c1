"""The Redis exact store against a real redis-server and a real local Redis Cluster (the
``redis_url`` fixture runs each test on both): TTLs, outages, a restart on the same port, and
the client-side tier that Redis keeps coherent across processes."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from deja.cache.entry import CachedAnswer
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.exact.redis import KEY_PREFIX, RedisExactStore
from deja.cache.exact.tracking import TrackedTier
from deja.errors import CacheUnavailableError
from deja.redisclient import connect_redis, node_clients
from sim.runner import SimCluster
from tests.support import SIM_MODEL, RedisServer, free_port, until

pytestmark = pytest.mark.integration


async def test_set_get_delete_and_ttl(redis_url: str) -> None:
    client = connect_redis(redis_url, timeout=0.5)
    store = RedisExactStore(client, timeout=0.5, retry_seconds=0.1)
    key = uuid.uuid4().hex
    try:
        assert await store.ping()
        assert await store.get(key) is None
        answer = CachedAnswer(
            entry_id=key,
            endpoint="chat",
            model="m",
            finish_reason="stop",
            created_at=1.0,
            message={"role": "assistant", "content": "\u00e9t\u00e9 \x00"},
            usage={"total_tokens": 3},
        )
        await store.set(key, answer, ttl=1)
        assert await store.get(key) == answer
        await asyncio.sleep(1.1)
        assert await store.get(key) is None
        await store.set(key, answer, ttl=60)
        assert await store.delete(key) is True
        assert await store.delete(key) is False
    finally:
        await store.close()
        await client.aclose()


async def test_unreachable_redis_fails_fast_and_cools_down() -> None:
    client = connect_redis(f"redis://127.0.0.1:{free_port()}/0", timeout=0.2)
    store = RedisExactStore(client, timeout=0.2, retry_seconds=5)
    try:
        with pytest.raises(CacheUnavailableError):
            await store.get("k")
        started = time.monotonic()
        for _ in range(100):
            with pytest.raises(CacheUnavailableError):
                await store.get("k")
        assert time.monotonic() - started < 0.1  # cooling down: no network at all
        assert await store.ping() is False
    finally:
        await store.close()
        await client.aclose()


NOW = time.time()


def answer(key: str, text: str = "an answer") -> CachedAnswer:
    return CachedAnswer(
        entry_id=key,
        endpoint="chat",
        model="m",
        finish_reason="stop",
        created_at=NOW,
        message={"role": "assistant", "content": text},
        expires_at=NOW + 3600,
    )


@contextlib.asynccontextmanager
async def tracked_store(url: str) -> AsyncIterator[RedisExactStore]:
    """A Redis store with its client-side tier, as one gateway process has it."""
    client = connect_redis(url, timeout=0.5)
    tier = TrackedTier(
        client,
        prefix=KEY_PREFIX,
        tier=MemoryExactStore(max_entries=100, max_bytes=1 << 20),
        node_client=node_clients(url, timeout=0.5),
    )
    store = RedisExactStore(client, timeout=0.5, retry_seconds=0.1, tracking=tier)
    await store.open()
    try:
        await until(lambda: tier.live)
        yield store
    finally:
        await store.close()
        await client.aclose()


def local(store: RedisExactStore, key: str) -> CachedAnswer | None:
    assert store.tracking is not None
    return store.tracking.get(key)


async def test_a_write_or_delete_anywhere_drops_every_process_local_copy(redis_url: str) -> None:
    key = uuid.uuid4().hex
    async with tracked_store(redis_url) as one, tracked_store(redis_url) as two:
        await one.set(key, answer(key), ttl=60)
        assert await two.get(key) == answer(key)  # read from Redis ...
        assert local(two, key) is not None  # ... and kept in two's tier
        await one.set(key, answer(key, "newer"), ttl=60)  # another process writes
        await until(lambda: local(two, key) is None)
        assert (await two.get(key)) == answer(key, "newer")
        await one.delete(key)  # another process deletes (an admin invalidation)
        await until(lambda: local(two, key) is None)
        assert await two.get(key) is None


async def test_flushall_and_a_lost_subscription_empty_the_tier() -> None:
    server = RedisServer()
    server.start()
    key = uuid.uuid4().hex
    try:
        async with tracked_store(server.url) as store:
            await store.set(key, answer(key), ttl=60)
            assert await store.get(key) is not None and local(store, key) is not None
            client = connect_redis(server.url, timeout=0.5)
            await client.flushall()
            await client.aclose()
            await until(lambda: local(store, key) is None)
            await store.set(key, answer(key), ttl=60)
            await store.get(key)
            assert local(store, key) is not None
            server.stop()  # invalidations can no longer arrive: the tier must not answer
            tier = store.tracking
            assert tier is not None
            await until(lambda: not tier.live)
            assert local(store, key) is None
            with pytest.raises(CacheUnavailableError):
                await store.get(key)
            server.start()
            await until(lambda: tier.live)
            assert await store.get(key) is None  # a restarted (empty) Redis is the truth
    finally:
        server.stop()


async def test_an_invalidation_during_a_read_keeps_the_read_out_of_the_tier(
    redis_url: str,
) -> None:
    key = uuid.uuid4().hex
    async with tracked_store(redis_url) as store:
        tier = store.tracking
        assert tier is not None
        await store.set(key, answer(key), ttl=60)
        generation = tier.begin_read(key)  # a GET is in flight and has read the old value
        other = connect_redis(redis_url, timeout=0.5)
        await other.delete(KEY_PREFIX + key)  # meanwhile another process deletes it
        await other.aclose()
        await asyncio.sleep(0.2)  # the invalidation arrives before the GET's reply is used
        tier.end_read(key, generation, answer(key))
        assert tier.get(key) is None


async def test_hit_counts_are_summed_and_written_in_one_flush(redis_url: str) -> None:
    key = uuid.uuid4().hex
    async with tracked_store(redis_url) as store:
        await store.set(key, answer(key), ttl=60)
        for _ in range(5):
            store.note_hit(key)
        counts = {e.answer.entry_id: e.hits for e in await store.scan()}
        assert counts[key] == 5
        await store.set(key, answer(key, "new"), ttl=60)  # a new answer counts from zero
        assert {e.answer.entry_id: e.hits for e in await store.scan()}[key] == 0
        await store.delete(key)


async def test_a_redis_restart_costs_no_off_answers_beyond_the_outage(
    sims: SimCluster, make_gateway: Any
) -> None:
    """Stale pooled connections after a restart on the same port are retried once on a fresh
    connection, so caching resumes as soon as Redis answers (the cool-down after the last
    failure, ``redis_retry_seconds``, is the only grace). The per-operation timeout is long
    here: 32 reconnections at once on a loaded 2-core machine can outlast the default 0.25 s,
    and a timeout is another path (it turns the cache off by design), not the one tested."""
    server = RedisServer()
    server.start()
    grace = 0.3
    try:
        async with (
            make_gateway(
                replicas=sims.urls,
                redis_url=server.url,
                redis_retry_seconds=grace,
                redis_timeout_seconds=5.0,
            ) as (url, _),
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            questions = [uuid.uuid4().hex for _ in range(8)]

            async def outcome(question: str) -> str:
                body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": question}]}
                resp = await http.post("/v1/chat/completions", json=body)
                assert resp.status_code == 200
                return resp.headers["x-deja-cache"]

            async def wave() -> list[str]:  # 32 at once: the pool holds many connections
                return await asyncio.gather(*(outcome(q) for q in questions * 4))

            await wave()
            assert "off" not in await wave()
            server.stop()
            assert "off" in await wave()
            server.start()  # same port, empty
            back = time.monotonic()
            await asyncio.sleep(grace)
            seen: list[str] = []
            while time.monotonic() - back < 3.0:
                seen += await wave()
            assert "off" not in seen, f"{seen.count('off')} off answers after the outage"
            assert "exact" in seen  # caching resumed
    finally:
        server.stop()


async def test_two_processes_sharing_redis_keep_the_invalidation_promise(
    sims: SimCluster, redis_url: str, make_gateway: Any
) -> None:
    """Both gateways answer from their local tier; an admin delete on one is a miss on both."""
    body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
    admin = {"authorization": "Bearer admin"}
    # A generous per-operation timeout: this checks the promise, not Redis's latency on a
    # loaded machine (at 0.25 s a slow reply turns a hit into `off`).
    common = {
        "replicas": sims.urls,
        "redis_url": redis_url,
        "admin_key": "admin",
        "redis_timeout_seconds": 2.0,
    }
    async with (
        make_gateway(**common) as (one, app_one),
        make_gateway(**common) as (two, app_two),
        httpx.AsyncClient(timeout=10) as http,
    ):
        for app in (app_one, app_two):
            await until(lambda app=app: app.state.gateway.exact.store.tracking.live)
        first = await http.post(one + "/v1/chat/completions", json=body)
        await app_one.state.gateway.pipeline.drain()
        entry = first.headers["x-deja-entry"]
        for base in (one, two):
            for _ in range(2):
                hit = await http.post(base + "/v1/chat/completions", json=body)
                assert hit.headers["x-deja-cache"] == "exact"
        for app in (app_one, app_two):
            assert app.state.gateway.exact.store.tracking.get(entry) is not None  # served locally
        deleted = await http.delete(f"{one}/admin/cache/entries/{entry}", headers=admin)
        assert deleted.status_code == 200
        after = await http.post(two + "/v1/chat/completions", json=body)
        assert after.headers["x-deja-cache"] == "miss"


async def test_a_dropped_invalidation_connection_is_tracked_again(redis_url: str) -> None:
    """redis-py reconnects a pub/sub connection and subscribes again by itself; the new
    connection must be tracked again too, or invalidations would stop without a sound."""
    key = uuid.uuid4().hex
    async with tracked_store(redis_url) as store:
        tier = store.tracking
        assert tier is not None
        other = connect_redis(redis_url, timeout=0.5)
        try:
            await other.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            await asyncio.sleep(0.3)
            await until(lambda: tier.live)
            await store.set(key, answer(key), ttl=60)
            assert await store.get(key) is not None and tier.get(key) is not None
            await other.set(KEY_PREFIX + key, answer(key, "changed elsewhere").to_bytes())
            await until(lambda: tier.get(key) is None)
            assert await store.get(key) == answer(key, "changed elsewhere")
        finally:
            await other.delete(KEY_PREFIX + key)
            await other.aclose()
