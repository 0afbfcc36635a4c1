"""Layer 1, the exact-match cache: one interface, an in-process LRU and a Redis backend.

Backends raise :class:`app.errors.CacheUnavailableError` when they cannot answer; the pipeline
then serves the request without the cache (``X-Deja-Cache: off``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol


class ExactStore(Protocol):
    """Byte values under string keys, each with its own TTL."""

    name: str

    async def get(self, key: str) -> bytes | None:
        """The value under ``key``, or None when absent or expired."""

    async def set(self, key: str, value: bytes, ttl: int) -> None:
        """Store ``value`` for ``ttl`` seconds."""

    async def delete(self, key: str) -> bool:
        """Remove ``key``; True when it existed."""

    async def ping(self) -> bool:
        """True when the backend answers."""

    async def close(self) -> None:
        """Release what the store created."""


class MemoryExactStore:
    """In-process LRU with per-entry TTL, bounded by entry count and total value bytes."""

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
        self._data: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def _drop(self, key: str) -> None:
        _, value = self._data.pop(key)
        self._bytes -= len(value)

    async def get(self, key: str) -> bytes | None:
        item = self._data.get(key)
        if item is None:
            return None
        expires_at, value = item
        if expires_at <= self._clock():
            self._drop(key)
            return None
        self._data.move_to_end(key)
        return value

    async def set(self, key: str, value: bytes, ttl: int) -> None:
        if len(value) > self._max_bytes:
            return
        if key in self._data:
            self._drop(key)
        self._data[key] = (self._clock() + ttl, value)
        self._bytes += len(value)
        while len(self._data) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._data)))

    async def delete(self, key: str) -> bool:
        if key not in self._data:
            return False
        self._drop(key)
        return True

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self._data.clear()
        self._bytes = 0
