"""The Redis backend of the exact cache (``redis.asyncio`` with the hiredis parser, one pool).

A failing Redis never fails a request: every error becomes ``CacheUnavailableError`` and, for
``retry_seconds`` afterwards, calls fail fast without touching the network, so a dead Redis costs
nothing per request. After that the pool reconnects by itself and caching resumes.

A Redis restart leaves every pooled connection stale. Each command is therefore retried once,
at once, on a fresh connection when its connection turns out to be closed (``ConnectionError``
only: a timeout is never retried, the wait was already spent), and a connection idle for
``HEALTH_CHECK_SECONDS`` is pinged before use; one stale connection no longer turns the cache
off for ``retry_seconds``.

With ``tracking`` (a :class:`TrackedTier`), answers read from Redis are kept in a bounded
in-process tier that Redis keeps coherent across processes (``deja.cache.exact.tracking``), so
most hits never leave the process. Hit counts are summed in memory and written every
``FLUSH_SECONDS`` in one pipeline (``INCRBY``), not one round trip per hit. With
``auto_pipeline``, the reads that do reach Redis in one event-loop turn leave as one ``MGET``
(``deja.cache.exact.pipelining``): one ``MGET`` on a single node, one pipeline per node on a
cluster (``deja.redisclient``).

On a Redis Cluster the store works unchanged: every entry is one key (``deja:x:<entry id>``,
no hash tag, so entries spread over every slot), its hit counter another
(``deja:h:<entry id>``, wherever its own slot is: nothing needs the two together), and a
scan visits every master (``SCAN`` per master, the client's ``scan_iter``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import StoredEntry
from deja.cache.exact.pipelining import GetBatcher
from deja.cache.exact.tracking import TrackedTier, end_tasks
from deja.errors import CacheUnavailableError, describe
from deja.outage import Outage
from deja.redisclient import REDIS_ERRORS, RedisClient, read_many, refresh_after

log = logging.getLogger("deja.cache")

KEY_PREFIX = "deja:x:"
HITS_PREFIX = "deja:h:"
HITS_TTL_SECONDS = 30 * 86_400
SCAN_BATCH = 500
#: How often summed hit counts are written.
FLUSH_SECONDS = 1.0


class RedisExactStore:
    """Exact-cache entries as Redis strings with ``EX`` TTLs."""

    name = "redis"

    def __init__(
        self,
        client: RedisClient,
        *,
        timeout: float,
        retry_seconds: float,
        tracking: TrackedTier | None = None,
        auto_pipeline: bool = False,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._retry_seconds = retry_seconds
        self._down_until = 0.0
        self._outage = Outage(
            log, "redis failed, exact cache off for now", "redis is reachable again, cache back on"
        )
        self.tracking = tracking
        self._batcher = GetBatcher(self._mget) if auto_pipeline else None
        self._hits: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        """Start writing hit counts and, with tracking, the invalidation subscription."""
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._flush_forever()))
        if self.tracking is not None:
            self._tasks.append(loop.create_task(self.tracking.run_forever()))

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
        tracking = self.tracking
        if tracking is None:
            return await self._read(key)
        local = tracking.get(key)
        if local is not None:
            return local
        generation = tracking.begin_read(key)
        answer = None
        try:
            answer = await self._read(key)
        finally:
            tracking.end_read(key, generation, answer)
        return answer

    async def _read(self, key: str) -> CachedAnswer | None:
        self._check_open()
        try:
            async with asyncio.timeout(self._timeout):
                value: bytes | str | None
                if self._batcher is not None:
                    value = await self._batcher.get(key)
                else:
                    value = await self._client.get(KEY_PREFIX + key)
        except REDIS_ERRORS as exc:
            raise self._failed("get", exc) from exc
        self._recovered()
        return CachedAnswer.from_bytes(value) if isinstance(value, bytes) else None

    async def _mget(self, keys: list[str]) -> list[bytes | BaseException | None]:
        values = await read_many(self._client, [KEY_PREFIX + k for k in keys])
        return [v if isinstance(v, bytes | BaseException) else None for v in values]

    def _before_write(self, key: str) -> None:
        """A write or delete of ``key``: refused once closed; the pending hit count and this
        process's tier copy are dropped first (the tier must never serve the old answer)."""
        self._check_open()
        self._hits.pop(key, None)
        if self.tracking is not None:
            self.tracking.forget(key)

    async def set(self, key: str, answer: CachedAnswer, ttl: int) -> None:
        self._before_write(key)
        try:
            async with asyncio.timeout(self._timeout):
                pipeline = self._client.pipeline(transaction=False)
                async with refresh_after(self._client), pipeline as pipe:
                    pipe.set(KEY_PREFIX + key, answer.to_bytes(), ex=ttl)
                    pipe.delete(HITS_PREFIX + key)  # a new answer counts from zero
                    await pipe.execute()
        except REDIS_ERRORS as exc:
            raise self._failed("set", exc) from exc
        self._recovered()

    def note_hit(self, key: str) -> None:
        self._hits[key] = self._hits.get(key, 0) + 1

    async def flush_hits(self) -> None:
        """Write the hit counts summed since the last flush, in one pipeline; a lost count
        never matters to a client."""
        if not self._hits or (self._down_until and time.monotonic() < self._down_until):
            return
        pending, self._hits = self._hits, {}
        with contextlib.suppress(*REDIS_ERRORS):
            async with asyncio.timeout(self._timeout):
                pipeline = self._client.pipeline(transaction=False)
                async with refresh_after(self._client), pipeline as pipe:
                    for key, count in pending.items():
                        pipe.incrby(HITS_PREFIX + key, count)
                        pipe.expire(HITS_PREFIX + key, HITS_TTL_SECONDS)
                    await pipe.execute()

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush_hits()

    async def scan(self) -> list[StoredEntry]:
        await self.flush_hits()
        self._check_open()
        entries: list[StoredEntry] = []
        try:
            keys = [k async for k in self._client.scan_iter(KEY_PREFIX + "*", count=SCAN_BATCH)]
            for start in range(0, len(keys), SCAN_BATCH):
                batch = keys[start : start + SCAN_BATCH]
                ids = [k.decode()[len(KEY_PREFIX) :] for k in batch]
                values = await read_many(self._client, batch)
                hits = await read_many(self._client, [HITS_PREFIX + i for i in ids])
                for value, count in zip(values, hits, strict=True):
                    if isinstance(value, BaseException):
                        raise value
                    if isinstance(value, bytes):
                        counted = int(count) if isinstance(count, bytes | int) else 0
                        entries.append(StoredEntry(CachedAnswer.from_bytes(value), counted))
        except REDIS_ERRORS as exc:
            raise self._failed("scan", exc) from exc
        return entries

    async def count(self) -> int:
        self._check_open()
        try:
            return sum(
                [1 async for _ in self._client.scan_iter(KEY_PREFIX + "*", count=SCAN_BATCH)]
            )
        except REDIS_ERRORS as exc:
            raise self._failed("count", exc) from exc

    async def delete(self, key: str) -> bool:
        self._before_write(key)
        try:
            async with asyncio.timeout(self._timeout):
                removed: int = await self._client.delete(KEY_PREFIX + key, HITS_PREFIX + key)
        except REDIS_ERRORS as exc:
            raise self._failed("delete", exc) from exc
        self._recovered()
        return removed > 0

    async def ping(self) -> bool:
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.ping()  # one node of a cluster: a failover must not unready all
        except REDIS_ERRORS:
            return False
        return True

    async def close(self) -> None:
        """Stop the background work and write pending hit counts; the client belongs to whoever
        built it."""
        await end_tasks(self._tasks)
        self._tasks.clear()
        await self.flush_hits()
