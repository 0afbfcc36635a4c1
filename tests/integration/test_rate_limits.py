"""Rate limits: the in-process bucket, and the Redis bucket that several workers share (a key's
budget is global, not N × rpm)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis

from deja.errors import RateLimitError
from deja.redisclient import connect_redis
from deja.tenancy.ratelimit import MemoryRateLimiter, RedisRateLimiter

pytestmark = pytest.mark.integration


async def test_memory_bucket_refills_at_rpm_per_minute() -> None:
    limiter = MemoryRateLimiter()
    for _ in range(3):
        limiter.take_at("k", 3, 100.0)
    with pytest.raises(RateLimitError) as info:
        limiter.take_at("k", 3, 100.0)
    assert info.value.retry_after == 20  # one token every 20 s at 3 rpm
    limiter.take_at("k", 3, 120.5)  # refilled one


async def test_redis_bucket_is_shared_by_every_process(redis_url: str) -> None:
    key = uuid.uuid4().hex
    clients = [connect_redis(redis_url, timeout=1.0) for _ in range(3)]
    try:
        workers = [RedisRateLimiter(c) for c in clients]  # as three worker processes would
        results = await asyncio.gather(
            *(workers[i % 3].take(key, 5) for i in range(12)), return_exceptions=True
        )
        refused = [r for r in results if isinstance(r, RateLimitError)]
        assert len(refused) == 7  # 5 per minute in all, not 5 per worker
        assert all(1 <= r.retry_after <= 12 for r in refused)
    finally:
        for client in clients:
            await client.aclose()


async def test_redis_down_admits_rather_than_refuses() -> None:
    client = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    try:
        await RedisRateLimiter(client).take("k", 1)
        await RedisRateLimiter(client).take("k", 1)
    finally:
        await client.aclose()
