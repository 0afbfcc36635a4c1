"""The Redis exact store against a real redis-server."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from app.errors import CacheUnavailableError
from middleware.exact_redis import RedisExactStore
from tests.support import free_port

pytestmark = pytest.mark.integration


async def test_set_get_delete_and_ttl(redis_url: str) -> None:
    store = RedisExactStore(redis_url, timeout=0.5, retry_seconds=0.1)
    key = uuid.uuid4().hex
    try:
        assert await store.ping()
        assert await store.get(key) is None
        await store.set(key, b"\x00value", ttl=1)
        assert await store.get(key) == b"\x00value"
        await asyncio.sleep(1.1)
        assert await store.get(key) is None
        await store.set(key, b"v", ttl=60)
        assert await store.delete(key) is True
        assert await store.delete(key) is False
    finally:
        await store.close()


async def test_unreachable_redis_fails_fast_and_cools_down() -> None:
    store = RedisExactStore(f"redis://127.0.0.1:{free_port()}/0", timeout=0.2, retry_seconds=5)
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
