"""The default exact store: a bounded in-process tier in front of the durable store on disk.

Reads are served from the in-process tier (:class:`MemoryExactStore`: the answer object itself,
nothing decoded, no thread hop); a tier miss reads the disk store on its thread and promotes the
answer with the TTL it has left. Writes and deletes go to both. The disk store is the truth for
everything the admin API sees (scan, count, hit counts), and it survives a restart; the tier is
only ever a subset of it.

Invalidation: a delete (or a newer write) that lands while a disk read is in flight must not be
undone when that read returns and promotes what it found. Every write and delete bumps an epoch;
a read promotes only when the epoch is unchanged since it started. One process owns the data
dir (``deja.datadir``), so no other process can change the disk store behind the tier's back.
"""

from __future__ import annotations

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import StoredEntry
from deja.cache.exact.disk import SqliteExactStore
from deja.cache.exact.memory import MemoryExactStore


class TieredExactStore:
    """In-process LRU tier + SQLite on disk, behind the one ``ExactStore`` protocol."""

    name = "disk"

    def __init__(self, memory: MemoryExactStore, disk: SqliteExactStore) -> None:
        self.memory = memory
        self.disk = disk
        self._epoch = 0

    async def open(self) -> None:
        await self.disk.open()

    async def get(self, key: str) -> CachedAnswer | None:
        answer = self.memory.peek(key)  # the hot path: no coroutine, no thread
        if answer is not None:
            return answer
        epoch = self._epoch
        found = await self.disk.get_with_expiry(key)
        if found is None:
            return None
        answer, expires_at = found
        if epoch == self._epoch:
            remaining = expires_at - self.disk.now()
            if remaining > 0:
                await self.memory.set(key, answer, remaining)
        return answer

    async def set(self, key: str, answer: CachedAnswer, ttl: float) -> None:
        """Disk first: an answer is served as a hit only once it would survive a crash."""
        self._epoch += 1
        await self.disk.set(key, answer, ttl)
        await self.memory.set(key, answer, ttl)

    async def delete(self, key: str) -> bool:
        self._epoch += 1
        in_memory = await self.memory.delete(key)
        on_disk = await self.disk.delete(key)
        return in_memory or on_disk

    def note_hit(self, key: str) -> None:
        self.disk.note_hit(key)

    async def scan(self) -> list[StoredEntry]:
        return await self.disk.scan()

    async def count(self) -> int:
        return await self.disk.count()

    async def ping(self) -> bool:
        return await self.disk.ping()

    async def close(self) -> None:
        await self.memory.close()
        await self.disk.close()
