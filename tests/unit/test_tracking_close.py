"""The client-side tier's subscription tasks end when cancelled, and closing never hangs, even
when a redis-py call swallows the cancellation (a listening task seen alive 300 s after its
cancel held a store's close for ever in CI). Fakes only stand in for the failing call."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import redis.asyncio as aioredis

from deja.cache.exact import tracking
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.exact.tracking import TrackedTier, end_tasks


class SwallowingPubSub:
    """``get_message`` that eats its caller's cancellation and returns None, as a read that
    turned the cancel into its own timeout would."""

    def __init__(self) -> None:
        self.reads = 0

    async def get_message(self, timeout: float) -> None:  # noqa: ASYNC109 (redis-py's)
        self.reads += 1
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(timeout)

    async def ping(self) -> None:
        return None


async def swallow_until(released: asyncio.Event) -> None:
    """Eats every cancellation until the test releases it."""
    while not released.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await released.wait()


def tier() -> TrackedTier:
    client = cast(aioredis.Redis, object())
    store = MemoryExactStore(max_entries=10, max_bytes=1 << 20)
    return TrackedTier(client, prefix="deja:x:", tier=store)


async def test_a_listen_loop_ends_when_its_cancel_was_swallowed() -> None:
    pubsub = SwallowingPubSub()
    task = asyncio.create_task(tier()._listen(cast(Any, pubsub)))
    await asyncio.sleep(0.05)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=2 * tracking.PING_SECONDS + 0.5)
    assert done and task.cancelled()
    assert pubsub.reads >= 1


async def test_end_tasks_is_bounded_by_a_task_that_will_not_end() -> None:
    released = asyncio.Event()
    stubborn = asyncio.create_task(swallow_until(released))
    polite = asyncio.create_task(asyncio.sleep(10))
    await asyncio.sleep(0)  # both are waiting inside when the cancel comes
    loop = asyncio.get_running_loop()
    started = loop.time()
    await end_tasks([stubborn, polite], within=0.2)
    assert loop.time() - started < 1.0
    assert polite.cancelled()
    assert not stubborn.done()  # left behind, not waited on for ever
    released.set()
    await stubborn


async def test_a_close_that_swallows_its_timeout_is_left_behind(monkeypatch: Any) -> None:
    monkeypatch.setattr(tracking, "CLOSE_SECONDS", 0.2)
    released = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await tracking._close_within(swallow_until(released))
    assert loop.time() - started < 1.0
    released.set()
    await asyncio.sleep(0.01)
