"""Aliases on the exact layer (``deja.cache.exact.aliases``): an alias serves its entry's answer
under its own key, never outlives the entry, never chains, and goes with the entry."""

from __future__ import annotations

import time
from typing import Any

import pytest

from deja.cache.entry import CachedAnswer
from deja.cache.exact.aliases import MAX_ALIASES, AliasedStore
from deja.cache.exact.memory import MemoryExactStore

ENTRY = "e" * 64
ALIAS = "a" * 64


def answer(entry_id: str = ENTRY, *, ttl: float = 600, **extra: Any) -> CachedAnswer:
    now = time.time()
    return CachedAnswer(
        entry_id=entry_id,
        endpoint="chat",
        model="m",
        finish_reason="stop",
        created_at=now - 5,
        message={"role": "assistant", "content": "Press reset."},
        tenant="t",
        namespace="ns",
        question="How do I reset it?",
        expires_at=now + ttl,
        sources=[{"corpus": "docs", "document": "reset.md", "version": "v1"}],
        **extra,
    )


@pytest.fixture
async def store() -> AliasedStore:
    aliased = AliasedStore(MemoryExactStore(max_entries=100, max_bytes=1 << 20))
    await aliased.set(ENTRY, answer(), 600)
    return aliased


async def test_an_alias_serves_the_entry_answer_under_its_own_key(store: AliasedStore) -> None:
    assert await store.promote(ENTRY, ALIAS, "How can I reset it?") is not None
    got = await store.get(ALIAS)
    assert got is not None and got.message == {"role": "assistant", "content": "Press reset."}
    assert got.entry_id == ALIAS and got.alias_of == ENTRY
    record = await store.record(ALIAS)
    assert record is not None and record.message is None  # a pointer, no answer of its own
    entry = await store.record(ENTRY)
    assert entry is not None and entry.aliases == [ALIAS]


async def test_an_alias_inherits_scope_age_expiry_and_sources(store: AliasedStore) -> None:
    await store.promote(ENTRY, ALIAS, "How can I reset it?")
    record, entry = await store.record(ALIAS), await store.record(ENTRY)
    assert record is not None and entry is not None
    assert (record.tenant, record.namespace, record.model) == ("t", "ns", "m")
    assert record.created_at == entry.created_at and record.expires_at == entry.expires_at
    assert record.sources == entry.sources and record.question == "How can I reset it?"


async def test_an_alias_whose_entry_is_gone_serves_nothing(store: AliasedStore) -> None:
    await store.promote(ENTRY, ALIAS, "How can I reset it?")
    await store.store.delete(ENTRY)  # as another process would, unaware of the alias list
    assert await store.get(ALIAS) is None


async def test_removing_an_entry_removes_its_aliases(store: AliasedStore) -> None:
    await store.promote(ENTRY, ALIAS, "How can I reset it?")
    await store.promote(ENTRY, "b" * 64, "Reset: how?")
    assert sorted(await store.remove(ENTRY)) == sorted([ENTRY, ALIAS, "b" * 64])
    assert await store.record(ALIAS) is None and await store.record("b" * 64) is None


async def test_removing_an_alias_keeps_the_entry(store: AliasedStore) -> None:
    await store.promote(ENTRY, ALIAS, "How can I reset it?")
    assert await store.remove(ALIAS) == [ALIAS]
    assert await store.get(ENTRY) is not None and await store.get(ALIAS) is None


async def test_a_listed_alias_overwritten_by_an_answer_of_its_own_is_kept(
    store: AliasedStore,
) -> None:
    """The alias's key got its own answer meanwhile (a miss stored after the promotion):
    removing the entry must not take an answer that is no alias any more."""
    await store.promote(ENTRY, ALIAS, "How can I reset it?")
    await store.set(ALIAS, answer(ALIAS), 600)
    assert await store.remove(ENTRY) == [ENTRY]
    assert await store.get(ALIAS) is not None


async def test_promotion_never_chains_nor_loops(store: AliasedStore) -> None:
    await store.promote(ENTRY, ALIAS, "How can I reset it?")
    assert await store.promote(ALIAS, "c" * 64, "Reset?") is None  # onto an alias
    assert await store.promote(ENTRY, ENTRY, "How do I reset it?") is None  # onto itself
    assert await store.promote("f" * 64, "c" * 64, "Reset?") is None  # no such entry
    assert await store.record("c" * 64) is None


async def test_promotion_is_idempotent_and_bounded(store: AliasedStore) -> None:
    await store.promote(ENTRY, ALIAS, "How can I reset it?")
    await store.promote(ENTRY, ALIAS, "How can I reset it?")
    entry = await store.record(ENTRY)
    assert entry is not None and entry.aliases == [ALIAS]
    for n in range(MAX_ALIASES):
        await store.promote(ENTRY, f"{n:064x}", f"question {n}")
    entry = await store.record(ENTRY)
    assert entry is not None and len(entry.aliases or []) == MAX_ALIASES


async def test_an_entry_about_to_expire_is_not_promoted_onto() -> None:
    store = AliasedStore(MemoryExactStore(max_entries=10, max_bytes=1 << 20))
    await store.set(ENTRY, answer(ttl=0.5), 1)
    assert await store.promote(ENTRY, ALIAS, "How can I reset it?") is None


async def test_an_alias_expires_with_its_entry() -> None:
    clock = [1000.0]
    memory = MemoryExactStore(max_entries=10, max_bytes=1 << 20, clock=lambda: clock[0])
    store = AliasedStore(memory)
    await store.set(ENTRY, answer(ttl=30), 30)
    await store.promote(ENTRY, ALIAS, "How can I reset it?")
    clock[0] += 31
    assert await store.get(ALIAS) is None and await store.record(ALIAS) is None
