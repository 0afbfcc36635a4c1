"""The bounded queue in front of the semantic layer's work (``middleware.slots``): holders
at most the cap, waiters served in arrival order, a bounded wait, no slot lost to a waiter
that is cancelled or gives up."""

from __future__ import annotations

import asyncio

import pytest

from middleware.slots import LookupSlots


async def hold(slots: LookupSlots, name: str, order: list[str], seconds: float) -> bool:
    if not await slots.acquire():
        return False
    order.append(name)
    try:
        await asyncio.sleep(seconds)
    finally:
        slots.release()
    return True


async def test_waiters_are_served_in_arrival_order_and_never_more_than_the_cap() -> None:
    slots = LookupSlots(2, wait=5.0)
    order: list[str] = []
    most = 0

    async def watch() -> None:
        nonlocal most
        while True:
            most = max(most, slots.running)
            await asyncio.sleep(0.001)

    watcher = asyncio.ensure_future(watch())
    tasks = []
    for i in range(6):
        tasks.append(asyncio.ensure_future(hold(slots, str(i), order, 0.02)))
        await asyncio.sleep(0)  # arrive one after the other
    assert all(await asyncio.gather(*tasks))
    watcher.cancel()
    assert order == [str(i) for i in range(6)]
    assert most == 2 and slots.running == 0 and slots.queued == 0


async def test_a_waiter_gives_up_after_the_wait_and_holds_nothing() -> None:
    slots = LookupSlots(1, wait=0.05)
    order: list[str] = []
    busy = asyncio.ensure_future(hold(slots, "busy", order, 0.3))
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await slots.acquire()
    assert 0.04 < loop.time() - started < 0.2
    assert await busy and slots.running == 0
    assert await slots.acquire()  # the given-up waiter left no ghost in the line
    slots.release()


async def test_a_cancelled_waiter_frees_its_place_and_a_granted_one_its_slot() -> None:
    slots = LookupSlots(1, wait=5.0)
    assert await slots.acquire()
    waiting = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    granted = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0.01)
    slots.release()  # grants the slot to `granted` ...
    granted.cancel()  # ... which is cancelled before it runs: the slot must come back
    with pytest.raises(asyncio.CancelledError):
        await granted
    assert slots.running == 0
    assert await slots.acquire()
    slots.release()


async def test_slow_lookups_close_slots_and_fast_ones_open_them_again() -> None:
    slots = LookupSlots(8, wait=1.0)
    slots.finished(0.3, 0.25)  # timed out: halved
    assert slots.cap == 4.0
    slots.finished(0.2, 0.25)  # over half the budget: a quarter less
    assert slots.cap == 3.75
    for _ in range(20):
        slots.finished(0.3, 0.25)
    assert slots.cap == 1.0  # never below one
    assert await slots.acquire()
    second = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0.01)
    assert not second.done()
    for _ in range(10):
        slots.finished(0.01, 0.25)
    assert await second  # the slot that grew back is handed to the waiter at once
    assert slots.running == 2
    for _ in range(100):
        slots.finished(0.01, 0.25)
    assert slots.cap == 8.0


async def test_background_work_waits_behind_every_lookup() -> None:
    slots = LookupSlots(1, wait=5.0)
    assert await slots.acquire()
    order: list[str] = []

    async def take(name: str, background: bool) -> None:
        assert await slots.acquire(background=background)
        order.append(name)
        await asyncio.sleep(0.01)
        slots.release()

    tasks = [asyncio.ensure_future(take("settle", True))]
    await asyncio.sleep(0)
    tasks += [asyncio.ensure_future(take(f"lookup{i}", False)) for i in range(2)]
    await asyncio.sleep(0.01)
    slots.release()
    await asyncio.gather(*tasks)
    assert order == ["lookup0", "lookup1", "settle"]
