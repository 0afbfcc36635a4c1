"""The Redis exact store against a real redis-server."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from deja.cache.entry import CachedAnswer
from deja.cache.exact.redis import RedisExactStore, connect_redis
from deja.errors import CacheUnavailableError
from tests.support import free_port

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
