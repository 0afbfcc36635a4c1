from __future__ import annotations

from deja.cache.entry import CachedAnswer
from deja.cache.exact.memory import MemoryExactStore


def answer(text: str) -> CachedAnswer:
    return CachedAnswer(
        entry_id="e",
        endpoint="completion",
        model="m",
        finish_reason="stop",
        created_at=0.0,
        text=text,
    )


def size(text: str) -> int:
    return len(answer(text).to_bytes())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_get_set_and_ttl_expiry() -> None:
    clock = Clock()
    store = MemoryExactStore(max_entries=10, max_bytes=10_000, clock=clock)
    await store.set("a", answer("1"), ttl=5)
    assert await store.get("a") == answer("1")
    clock.now += 4.9
    assert await store.get("a") == answer("1")
    clock.now += 0.2
    assert await store.get("a") is None
    assert len(store) == 0


async def test_lru_evicts_least_recently_used_by_count() -> None:
    store = MemoryExactStore(max_entries=2, max_bytes=10_000)
    await store.set("a", answer("1"), ttl=60)
    await store.set("b", answer("2"), ttl=60)
    assert await store.get("a") == answer("1")  # a is now most recent
    await store.set("c", answer("3"), ttl=60)
    assert await store.get("b") is None
    assert await store.get("a") == answer("1")
    assert await store.get("c") == answer("3")


async def test_byte_bound_evicts_and_accounts_exactly() -> None:
    big, small = "x" * 600, "z" * 10
    store = MemoryExactStore(max_entries=100, max_bytes=size(big) + size(small) + 100)
    await store.set("a", answer(big), ttl=60)
    await store.set("b", answer(big), ttl=60)
    assert await store.get("a") is None
    assert store.total_bytes == size(big)
    await store.set("b", answer(small), ttl=60)  # replace shrinks the account
    assert store.total_bytes == size(small)
    await store.set("huge", answer("h" * 5000), ttl=60)  # larger than the bound: not stored
    assert await store.get("huge") is None
    assert await store.get("b") == answer(small)


async def test_delete() -> None:
    store = MemoryExactStore(max_entries=10, max_bytes=10_000)
    await store.set("a", answer("1"), ttl=60)
    assert await store.delete("a") is True
    assert await store.delete("a") is False
    assert store.total_bytes == 0
