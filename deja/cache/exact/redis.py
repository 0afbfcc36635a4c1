"""The Redis backend of the exact cache (``redis.asyncio``, one connection pool).

A failing Redis never fails a request: every error becomes ``CacheUnavailableError`` and, for
``retry_seconds`` afterwards, calls fail fast without touching the network, so a dead Redis costs
nothing per request. After that the pool reconnects by itself and caching resumes.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import StoredEntry
from deja.errors import CacheUnavailableError, describe
from deja.observability.outage import Outage

log = logging.getLogger("deja.cache")

KEY_PREFIX = "deja:x:"
HITS_PREFIX = "deja:h:"
SCAN_BATCH = 500


def connect_redis(url: str, *, timeout: float, max_connections: int = 256) -> aioredis.Redis:
    """The one Redis client of a gateway process: no client-side retries (a failure is reported
    at once and the store cools down), per-operation timeouts."""
    client: aioredis.Redis = aioredis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        max_connections=max_connections,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )
    return client


class RedisExactStore:
    """Exact-cache entries as Redis strings with ``EX`` TTLs."""

    name = "redis"

    def __init__(self, client: aioredis.Redis, *, timeout: float, retry_seconds: float) -> None:
        self._client = client
        self._timeout = timeout
        self._retry_seconds = retry_seconds
        self._down_until = 0.0
        self._outage = Outage(
            log, "redis failed, exact cache off for now", "redis is reachable again, cache back on"
        )
        self._pending: set[asyncio.Task[None]] = set()

    def _check_open(self) -> None:
        if self._down_until and time.monotonic() < self._down_until:
            raise CacheUnavailableError("redis is unavailable (cooling down after an error)")

    def _failed(self, op: str, exc: BaseException) -> CacheUnavailableError:
        self._outage.failed(exc)
        self._down_until = time.monotonic() + self._retry_seconds
        return CacheUnavailableError(f"redis {op} failed: {describe(exc)}")

    def _recovered(self) -> None:
        if self._down_until:
            self._outage.ok()
            self._down_until = 0.0

    async def get(self, key: str) -> CachedAnswer | None:
        self._check_open()
        try:
            async with asyncio.timeout(self._timeout):
                value = await self._client.get(KEY_PREFIX + key)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed("get", exc) from exc
        self._recovered()
        return CachedAnswer.from_bytes(value) if isinstance(value, bytes) else None

    async def set(self, key: str, answer: CachedAnswer, ttl: int) -> None:
        self._check_open()
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.set(KEY_PREFIX + key, answer.to_bytes(), ex=ttl)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed("set", exc) from exc
        self._recovered()

    def note_hit(self, key: str) -> None:
        task = asyncio.get_running_loop().create_task(self._count_hit(key))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _count_hit(self, key: str) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                async with self._client.pipeline(transaction=False) as pipe:
                    pipe.incr(HITS_PREFIX + key)
                    pipe.expire(HITS_PREFIX + key, 30 * 86_400)
                    await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            return  # a lost hit count never matters to a client

    async def scan(self) -> list[StoredEntry]:
        self._check_open()
        entries: list[StoredEntry] = []
        try:
            keys = [k async for k in self._client.scan_iter(KEY_PREFIX + "*", count=SCAN_BATCH)]
            for start in range(0, len(keys), SCAN_BATCH):
                batch = keys[start : start + SCAN_BATCH]
                ids = [k.decode()[len(KEY_PREFIX) :] for k in batch]
                values = await self._client.mget(batch)
                hits = await self._client.mget([HITS_PREFIX + i for i in ids])
                for value, count in zip(values, hits, strict=True):
                    if isinstance(value, bytes):
                        entries.append(StoredEntry(CachedAnswer.from_bytes(value), int(count or 0)))
        except (RedisError, OSError) as exc:
            raise self._failed("scan", exc) from exc
        return entries

    async def count(self) -> int:
        self._check_open()
        try:
            return sum(
                [1 async for _ in self._client.scan_iter(KEY_PREFIX + "*", count=SCAN_BATCH)]
            )
        except (RedisError, OSError) as exc:
            raise self._failed("count", exc) from exc

    async def delete(self, key: str) -> bool:
        self._check_open()
        try:
            async with asyncio.timeout(self._timeout):
                removed: int = await self._client.delete(KEY_PREFIX + key, HITS_PREFIX + key)
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._failed("delete", exc) from exc
        self._recovered()
        return removed > 0

    async def ping(self) -> bool:
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.ping()
        except (RedisError, OSError, TimeoutError):
            return False
        return True

    async def close(self) -> None:
        """Wait for pending hit counters; the client belongs to whoever built it."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
