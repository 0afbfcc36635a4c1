"""Aliases: another question served an entry's answer, under its own exact key.

A judged paraphrase is promoted (issue 24) by writing an *alias record* under the paraphrase's
exact key: a :class:`CachedAnswer` with no answer of its own whose ``alias_of`` names the
entry. The entry lists its aliases (``aliases``). :class:`AliasedStore` wraps any exact store
(memory, disk, Redis) and is the only view the gateway has of it:

* ``get`` follows an alias to its entry (one more read, alias hits only) and returns the
  entry's answer under the alias's key with ``alias_of`` set, so ``X-Deja-Entry`` names the
  alias and feedback on it removes only the alias. An alias whose entry is gone resolves to
  nothing: removing an entry ends its aliases' hits at once, in every process, whether or not
  its alias list was complete (two processes promoting at once may each write the list, and
  one name may be lost; that alias then only waits for its TTL, unservable).
* ``remove`` takes an entry and every alias it lists that still points at it; an alias alone
  is removed alone. ``delete`` is ``remove`` for callers that only need to know it existed.
* an alias inherits what decides whether it may be served: tenant, namespace, model, TTL and
  expiry (the entry's, so both go at once), age (``created_at``, for ``max-age``) and RAG
  sources (so provenance invalidation finds it on its own too).

Aliases never chain: promoting onto an alias, or an entry onto itself, does nothing.
"""

from __future__ import annotations

import dataclasses
import math
import time

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import ExactStore, StoredEntry

__all__ = ["MAX_ALIASES", "AliasedStore", "alias_record"]

#: An entry keeps at most this many aliases; past it, nothing more is promoted onto it.
MAX_ALIASES = 64


def alias_record(entry: CachedAnswer, key: str, question: str) -> CachedAnswer:
    """The record stored under ``key`` for ``question``, an alias of ``entry``."""
    return CachedAnswer(
        entry_id=key,
        endpoint=entry.endpoint,
        model=entry.model,
        finish_reason=entry.finish_reason,
        created_at=entry.created_at,
        tenant=entry.tenant,
        namespace=entry.namespace,
        question=question,
        expires_at=entry.expires_at,
        sources=entry.sources,
        alias_of=entry.entry_id,
    )


class AliasedStore:
    """An exact store that knows aliases (the module's docstring); every other call passes
    through unchanged."""

    def __init__(self, store: ExactStore) -> None:
        self.store = store
        self.name = store.name

    async def get(self, key: str) -> CachedAnswer | None:
        answer = await self.store.get(key)
        if answer is None or answer.alias_of is None:
            return answer
        entry = await self.store.get(answer.alias_of)
        if entry is None or entry.alias_of is not None:
            return None
        return dataclasses.replace(entry, entry_id=key, alias_of=entry.entry_id)

    async def record(self, key: str) -> CachedAnswer | None:
        """What is stored under ``key``, an alias record as it is (admin, feedback)."""
        return await self.store.get(key)

    async def set(self, key: str, answer: CachedAnswer, ttl: int) -> None:
        await self.store.set(key, answer, ttl)

    async def remove(self, key: str) -> list[str]:
        """Remove ``key`` and, when it is an entry, its aliases: the keys that went (empty
        when nothing was there)."""
        record = await self.store.get(key)
        if not await self.store.delete(key):
            return []
        gone = [key]
        for alias in (record.aliases or []) if record is not None else []:
            found = await self.store.get(alias)
            if found is not None and found.alias_of == key and await self.store.delete(alias):
                gone.append(alias)
        return gone

    async def delete(self, key: str) -> bool:
        return bool(await self.remove(key))

    async def promote(self, entry_id: str, key: str, question: str) -> CachedAnswer | None:
        """Make ``key`` (the exact key of ``question``) an alias of ``entry_id``: the alias
        record first, then the entry's list. The entry, or None when nothing was promoted (no
        such entry, an alias, the same key, too many aliases, about to expire)."""
        entry = await self.store.get(entry_id)
        if entry is None or entry.alias_of is not None or key == entry_id:
            return None
        listed = entry.aliases or []
        if key in listed:
            return entry
        ttl = math.floor(entry.expires_at - time.time())
        if len(listed) >= MAX_ALIASES or ttl < 1:
            return None
        await self.store.set(key, alias_record(entry, key, question), ttl)
        updated = dataclasses.replace(entry, aliases=[*listed, key])
        await self.store.set(entry_id, updated, ttl)
        return updated

    def note_hit(self, key: str) -> None:
        self.store.note_hit(key)

    async def scan(self) -> list[StoredEntry]:
        return await self.store.scan()

    async def count(self) -> int:
        return await self.store.count()

    async def ping(self) -> bool:
        return await self.store.ping()

    async def close(self) -> None:
        await self.store.close()
