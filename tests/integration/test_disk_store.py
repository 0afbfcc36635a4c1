"""The embedded exact store on a real SQLite file: durable across reopen, TTLs on disk, hit
counts, and the in-process tier in front of it keeping the invalidation promise."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from deja.cache.entry import CachedAnswer
from deja.cache.exact.disk import SqliteExactStore
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.exact.tiered import TieredExactStore
from deja.errors import CacheUnavailableError

pytestmark = pytest.mark.integration


def answer(key: str, text: str = "an answer") -> CachedAnswer:
    return CachedAnswer(
        entry_id=key,
        endpoint="chat",
        model="m",
        finish_reason="stop",
        created_at=1.0,
        message={"role": "assistant", "content": text + " \u00e9t\u00e9 \x00"},
        usage={"completion_tokens": 3},
        tenant="acme",
        question="q?",
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def opener(tmp_path: Path, clock: Clock) -> Callable[[], SqliteExactStore]:
    return lambda: SqliteExactStore(tmp_path / "exact.sqlite3", sweep_seconds=3600, clock=clock)


@pytest.fixture
async def disk(opener: Callable[[], SqliteExactStore]) -> AsyncIterator[SqliteExactStore]:
    store = opener()
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_set_get_delete_and_ttl_on_disk(disk: SqliteExactStore, clock: Clock) -> None:
    assert await disk.ping()
    assert await disk.get("a") is None
    await disk.set("a", answer("a"), ttl=10)
    assert await disk.get("a") == answer("a")
    clock.now += 9.9
    assert await disk.get("a") == answer("a")
    clock.now += 0.2
    assert await disk.get("a") is None  # expired rows are never served
    assert await disk.count() == 0
    assert await disk.sweep() == 1  # ... and swept
    await disk.set("b", answer("b"), ttl=10)
    assert await disk.delete("b") is True
    assert await disk.delete("b") is False


async def test_entries_and_hit_counts_survive_reopening(
    opener: Callable[[], SqliteExactStore],
) -> None:
    first = opener()
    await first.open()
    await first.set("a", answer("a"), ttl=60)
    await first.set("b", answer("b", "other"), ttl=60)
    first.note_hit("a")
    first.note_hit("a")
    await first.close()  # writes the pending hit counts
    second = opener()
    await second.open()
    try:
        assert await second.get("a") == answer("a")
        second.note_hit("a")
        entries = {e.answer.entry_id: e.hits for e in await second.scan()}
        assert entries == {"a": 3, "b": 0}
        assert await second.count() == 2
        await second.set("a", answer("a", "new"), ttl=60)  # a new answer counts from zero
        assert {e.answer.entry_id: e.hits for e in await second.scan()}["a"] == 0
    finally:
        await second.close()


async def test_a_file_that_is_not_a_database_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "exact.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    store = SqliteExactStore(path)
    with pytest.raises(CacheUnavailableError, match="cannot open"):
        await store.open()


async def test_a_failing_disk_makes_the_cache_unavailable(disk: SqliteExactStore) -> None:
    await disk.set("a", answer("a"), ttl=60)
    other = sqlite3.connect(disk.path)  # the table goes away behind the store's back
    other.execute("ALTER TABLE entries RENAME TO moved")
    other.commit()
    with pytest.raises(CacheUnavailableError, match="no such table"):
        await disk.get("a")
    assert await disk.ping()  # the file itself still answers
    other.execute("ALTER TABLE moved RENAME TO entries")
    other.commit()
    other.close()
    assert await disk.get("a") == answer("a")


@pytest.fixture
async def tiered(
    opener: Callable[[], SqliteExactStore], clock: Clock
) -> AsyncIterator[TieredExactStore]:
    store = TieredExactStore(
        MemoryExactStore(max_entries=2, max_bytes=1_000_000, clock=clock), opener()
    )
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_tier_miss_reads_disk_and_promotes_with_the_remaining_ttl(
    tiered: TieredExactStore, clock: Clock
) -> None:
    for key in ("a", "b", "c"):  # the tier holds two: "a" is evicted from memory only
        await tiered.set(key, answer(key), ttl=10)
    assert len(tiered.memory) == 2
    assert await tiered.memory.get("a") is None
    clock.now += 4
    assert await tiered.get("a") == answer("a")  # from disk
    assert await tiered.memory.get("a") == answer("a")  # promoted ...
    clock.now += 6.1
    assert await tiered.memory.get("a") is None  # ... for the 6 s it had left, not 10
    assert await tiered.get("a") is None


async def test_delete_during_a_disk_read_is_not_undone_by_the_promotion(
    tiered: TieredExactStore,
) -> None:
    for key in ("a", "b", "c"):
        await tiered.set(key, answer(key), ttl=60)
    assert await tiered.memory.get("a") is None
    read = asyncio.create_task(tiered.get("a"))
    await asyncio.sleep(0)  # the read is on the disk thread
    deleted = asyncio.create_task(tiered.delete("a"))
    await read  # it may return what it read before the delete ...
    assert await deleted is True
    assert await tiered.memory.get("a") is None  # ... but never put it back in the tier
    assert await tiered.get("a") is None


async def test_tiered_store_survives_a_restart_and_counts_hits(
    opener: Callable[[], SqliteExactStore], clock: Clock
) -> None:
    first = TieredExactStore(MemoryExactStore(max_entries=10, max_bytes=1_000_000), opener())
    await first.open()
    await first.set("a", answer("a"), ttl=60)
    first.note_hit("a")
    await first.close()
    second = TieredExactStore(MemoryExactStore(max_entries=10, max_bytes=1_000_000), opener())
    await second.open()
    try:
        assert await second.get("a") == answer("a")
        assert [(e.answer.entry_id, e.hits) for e in await second.scan()] == [("a", 1)]
        assert await second.delete("a") is True
        assert await second.get("a") is None
        assert await second.count() == 0
    finally:
        await second.close()


async def test_the_sweep_gives_pages_back(
    opener: Callable[[], SqliteExactStore], clock: Clock
) -> None:
    def checkpointed_size() -> int:
        other = sqlite3.connect(store.path)
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        other.close()
        return store.path.stat().st_size

    store = opener()
    await store.open()
    try:
        for i in range(300):
            await store.set(f"k{i}", answer(f"k{i}", "x" * 4000), ttl=10)
        full = checkpointed_size()
        clock.now += 11
        assert await store.sweep() == 300
        assert checkpointed_size() < full / 4
    finally:
        await store.close()
