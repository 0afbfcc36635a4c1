"""Layer 1, the exact-match cache: the interface every backend implements.

Stores hold :class:`CachedAnswer` records under entry ids. Backends raise
:class:`deja.errors.CacheUnavailableError` when they cannot answer; the pipeline then serves the
request without the cache (``X-Deja-Cache: off``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from deja.cache.entry import CachedAnswer


@dataclass(frozen=True, slots=True)
class StoredEntry:
    answer: CachedAnswer
    hits: int


class ExactStore(Protocol):
    """Cached answers under entry ids, each with its own TTL."""

    name: str

    async def get(self, key: str) -> CachedAnswer | None:
        """The answer under ``key``, or None when absent or expired."""

    async def set(self, key: str, answer: CachedAnswer, ttl: int) -> None:
        """Store ``answer`` for ``ttl`` seconds."""

    async def delete(self, key: str) -> bool:
        """Remove ``key``; True when it existed."""

    def note_hit(self, key: str) -> None:
        """Count a served hit (never blocks the response; best effort)."""

    async def scan(self) -> list[StoredEntry]:
        """Every live entry with its hit count (admin: listing, invalidation)."""

    async def count(self) -> int:
        """How many entries the store holds."""

    async def ping(self) -> bool:
        """True when the backend answers."""

    async def close(self) -> None:
        """Release what the store created."""
