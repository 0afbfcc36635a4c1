from __future__ import annotations

from middleware.exact import MemoryExactStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_get_set_and_ttl_expiry() -> None:
    clock = Clock()
    store = MemoryExactStore(max_entries=10, max_bytes=10_000, clock=clock)
    await store.set("a", b"1", ttl=5)
    assert await store.get("a") == b"1"
    clock.now += 4.9
    assert await store.get("a") == b"1"
    clock.now += 0.2
    assert await store.get("a") is None
    assert len(store) == 0


async def test_lru_evicts_least_recently_used_by_count() -> None:
    store = MemoryExactStore(max_entries=2, max_bytes=10_000)
    await store.set("a", b"1", ttl=60)
    await store.set("b", b"2", ttl=60)
    assert await store.get("a") == b"1"  # a is now most recent
    await store.set("c", b"3", ttl=60)
    assert await store.get("b") is None
    assert await store.get("a") == b"1"
    assert await store.get("c") == b"3"


async def test_byte_bound_evicts_and_accounts_exactly() -> None:
    store = MemoryExactStore(max_entries=100, max_bytes=1024 + 10)
    await store.set("a", b"x" * 600, ttl=60)
    await store.set("b", b"y" * 600, ttl=60)
    assert await store.get("a") is None
    assert store.total_bytes == 600
    await store.set("b", b"z" * 10, ttl=60)  # replace shrinks the account
    assert store.total_bytes == 10
    await store.set("huge", b"h" * 5000, ttl=60)  # larger than the bound: not stored at all
    assert await store.get("huge") is None
    assert await store.get("b") == b"z" * 10


async def test_delete() -> None:
    store = MemoryExactStore(max_entries=10, max_bytes=10_000)
    await store.set("a", b"1", ttl=60)
    assert await store.delete("a") is True
    assert await store.delete("a") is False
    assert store.total_bytes == 0
