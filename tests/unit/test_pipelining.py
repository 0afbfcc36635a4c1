"""Auto-pipelining: the reads of one event-loop turn leave as one fetch; failures reach every
waiter; a waiter that gives up does not disturb the others."""

from __future__ import annotations

import asyncio

import pytest

from deja.cache.exact.pipelining import MAX_BATCH, GetBatcher


class Fetches:
    def __init__(self, fail: bool = False, delay: float = 0.0) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail
        self.delay = delay

    async def __call__(self, keys: list[str]) -> list[bytes | BaseException | None]:
        self.calls.append(keys)
        await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectionError("gone")
        return [None if k == "absent" else k.encode() for k in keys]


async def test_reads_of_one_turn_are_one_fetch_in_order() -> None:
    fetch = Fetches()
    batcher = GetBatcher(fetch)
    keys = ["a", "absent", "b", "a"]
    got = await asyncio.gather(*(batcher.get(k) for k in keys))
    assert got == [b"a", None, b"b", b"a"]
    assert fetch.calls == [keys]
    assert await batcher.get("c") == b"c"  # a later turn is a fetch of its own
    assert len(fetch.calls) == 2


async def test_a_large_turn_is_split() -> None:
    fetch = Fetches()
    batcher = GetBatcher(fetch)
    keys = [str(i) for i in range(MAX_BATCH + 5)]
    assert await asyncio.gather(*(batcher.get(k) for k in keys)) == [k.encode() for k in keys]
    assert [len(c) for c in fetch.calls] == [MAX_BATCH, 5]


async def test_a_failure_reaches_every_waiter() -> None:
    batcher = GetBatcher(Fetches(fail=True))
    results = await asyncio.gather(*(batcher.get(k) for k in "abc"), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)


async def test_a_waiter_that_gives_up_leaves_the_others_their_answer() -> None:
    batcher = GetBatcher(Fetches(delay=0.05))
    impatient = asyncio.create_task(batcher.get("a"))
    patient = asyncio.create_task(batcher.get("b"))
    await asyncio.sleep(0.01)
    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    assert await patient == b"b"


async def test_a_failed_node_fails_its_keys_alone() -> None:
    """A cluster's per-node pipeline returns a node's error in place of its keys' values."""

    async def fetch(keys: list[str]) -> list[bytes | BaseException | None]:
        return [ConnectionError("node down") if k.startswith("down") else k.encode() for k in keys]

    batcher = GetBatcher(fetch)
    keys = ["up-1", "down-1", "up-2"]
    results = await asyncio.gather(*(batcher.get(k) for k in keys), return_exceptions=True)
    assert results[0] == b"up-1" and results[2] == b"up-2"
    assert isinstance(results[1], ConnectionError)
