"""The in-process exact store: an LRU with per-entry TTL that keeps the answer objects
themselves, so an exact hit decodes nothing."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import StoredEntry


class MemoryExactStore:
    """In-process LRU with per-entry TTL, bounded by entry count and total bytes (each answer
    counted at its serialised size)."""

    name = "memory"

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._clock = clock
        self._data: OrderedDict[str, tuple[float, int, CachedAnswer]] = OrderedDict()
        self._hits: dict[str, int] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def _drop(self, key: str) -> None:
        _, size, _ = self._data.pop(key)
        self._hits.pop(key, None)
        self._bytes -= size

    async def get(self, key: str) -> CachedAnswer | None:
        return self.peek(key)

    def peek(self, key: str) -> CachedAnswer | None:
        """``get`` without a coroutine, for a tier that answers synchronously."""
        item = self._data.get(key)
        if item is None:
            return None
        expires_at, _, answer = item
        if expires_at <= self._clock():
            self._drop(key)
            return None
        self._data.move_to_end(key)
        return answer

    async def set(self, key: str, answer: CachedAnswer, ttl: float) -> None:
        self.put(key, answer, ttl)

    def put(self, key: str, answer: CachedAnswer, ttl: float) -> None:
        """``set`` without a coroutine."""
        size = len(answer.to_bytes())
        if size > self._max_bytes:
            return
        if key in self._data:
            self._drop(key)
        self._data[key] = (self._clock() + ttl, size, answer)
        self._bytes += size
        while len(self._data) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._data)))

    async def delete(self, key: str) -> bool:
        return self.discard(key)

    def discard(self, key: str) -> bool:
        """``delete`` without a coroutine."""
        if key not in self._data:
            return False
        self._drop(key)
        return True

    def note_hit(self, key: str) -> None:
        if key in self._data:
            self._hits[key] = self._hits.get(key, 0) + 1

    async def scan(self) -> list[StoredEntry]:
        now = self._clock()
        return [
            StoredEntry(answer, self._hits.get(key, 0))
            for key, (expires_at, _, answer) in self._data.items()
            if expires_at > now
        ]

    async def count(self) -> int:
        return len(self._data)

    async def ping(self) -> bool:
        return True

    def clear(self) -> None:
        self._data.clear()
        self._hits.clear()
        self._bytes = 0

    async def close(self) -> None:
        self.clear()
