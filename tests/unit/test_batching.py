"""MicroBatcher: batches form under concurrency, limits hold, errors and cancellations stay
where they belong, a lone item is not delayed."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from deja.embedding.batching import BatcherClosedError, MicroBatcher

TIMEOUT = 5.0


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=1)
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


class Recorder:
    """A batch function that doubles its items, records every batch and can be held."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.batches: list[list[int]] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.thread_ids: set[int] = set()

    def __call__(self, items: list[int]) -> list[int]:
        self.thread_ids.add(threading.get_ident())
        self.batches.append(list(items))
        self.started.set()
        self.release.wait(TIMEOUT)
        if self.delay:
            time.sleep(self.delay)
        return [2 * item for item in items]


async def test_batches_form_under_concurrency(executor: ThreadPoolExecutor) -> None:
    fn = Recorder(delay=0.005)
    batcher = MicroBatcher(fn, executor, max_items=8)
    results = await asyncio.wait_for(
        asyncio.gather(*(batcher.submit(i) for i in range(40))), TIMEOUT
    )
    assert results == [2 * i for i in range(40)]
    assert max(len(b) for b in fn.batches) > 1
    assert sorted(i for b in fn.batches for i in b) == list(range(40))
    assert sum(size * n for size, n in batcher.batch_sizes.items()) == 40
    assert threading.get_ident() not in fn.thread_ids  # never on the event loop's thread


@pytest.mark.parametrize("max_items", [1, 3, 16])
async def test_max_items_respected(executor: ThreadPoolExecutor, max_items: int) -> None:
    fn = Recorder(delay=0.002)
    batcher = MicroBatcher(fn, executor, max_items=max_items, max_wait=0.01)
    results = await asyncio.wait_for(
        asyncio.gather(*(batcher.submit(i) for i in range(37))), TIMEOUT
    )
    assert results == [2 * i for i in range(37)]
    assert all(1 <= len(b) <= max_items for b in fn.batches)
    assert max(batcher.batch_sizes) == max_items


async def test_an_error_reaches_every_waiter_of_the_batch(executor: ThreadPoolExecutor) -> None:
    calls = 0

    def failing(items: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("model exploded")
        return items

    batcher = MicroBatcher(failing, executor, max_items=10, max_wait=0.02)
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(batcher.submit(i) for i in range(5)), return_exceptions=True), TIMEOUT
    )
    assert calls == 1
    assert all(isinstance(o, ValueError) and str(o) == "model exploded" for o in outcomes)
    assert await asyncio.wait_for(batcher.submit(7), TIMEOUT) == 7  # the batcher still works


async def test_a_wrong_result_count_fails_the_batch(executor: ThreadPoolExecutor) -> None:
    batcher: MicroBatcher[int, int] = MicroBatcher(lambda items: items[:-1], executor)
    with pytest.raises(RuntimeError, match="results for"):
        await asyncio.wait_for(batcher.submit(1), TIMEOUT)


async def test_a_waiter_cancelled_while_queued_is_left_out(executor: ThreadPoolExecutor) -> None:
    fn = Recorder()
    fn.release.clear()
    batcher = MicroBatcher(fn, executor, max_items=8)
    first = asyncio.create_task(batcher.submit(1))
    await asyncio.to_thread(fn.started.wait, TIMEOUT)  # batch [1] is running and held
    queued = [asyncio.create_task(batcher.submit(i)) for i in (2, 3, 4)]
    await asyncio.sleep(0)
    assert batcher.pending == 3
    queued[1].cancel()
    fn.release.set()
    assert await asyncio.wait_for(first, TIMEOUT) == 2
    assert await asyncio.wait_for(queued[0], TIMEOUT) == 4
    assert await asyncio.wait_for(queued[2], TIMEOUT) == 8
    with pytest.raises(asyncio.CancelledError):
        await queued[1]
    assert fn.batches == [[1], [2, 4]]


async def test_a_waiter_cancelled_mid_batch_does_not_break_the_others(
    executor: ThreadPoolExecutor,
) -> None:
    fn = Recorder()
    fn.release.clear()
    batcher = MicroBatcher(fn, executor, max_items=8, max_wait=0.05)
    tasks = [asyncio.create_task(batcher.submit(i)) for i in range(4)]
    await asyncio.to_thread(fn.started.wait, TIMEOUT)  # all four run in one batch
    tasks[2].cancel()
    await asyncio.sleep(0)
    fn.release.set()
    assert await asyncio.wait_for(asyncio.gather(*tasks[:2], tasks[3]), TIMEOUT) == [0, 2, 6]
    assert tasks[2].cancelled()
    assert fn.batches == [[0, 1, 2, 3]]
    assert await asyncio.wait_for(batcher.submit(5), TIMEOUT) == 10


async def test_a_lone_item_runs_at_once(executor: ThreadPoolExecutor) -> None:
    batcher = MicroBatcher(Recorder(), executor, max_items=16)
    await batcher.submit(0)  # warm the executor's thread
    started = time.perf_counter()
    assert await asyncio.wait_for(batcher.submit(21), TIMEOUT) == 42
    assert time.perf_counter() - started < 0.05


async def test_fixed_wait_holds_a_lone_item_but_not_a_full_batch(
    executor: ThreadPoolExecutor,
) -> None:
    wait = 0.15
    batcher = MicroBatcher(Recorder(), executor, max_items=4, max_wait=wait)
    started = time.perf_counter()
    assert await asyncio.wait_for(batcher.submit(1), TIMEOUT) == 2
    assert time.perf_counter() - started >= wait * 0.9
    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(batcher.submit(i) for i in range(4))), TIMEOUT)
    assert time.perf_counter() - started < wait * 0.9  # max_items reached: no wait


async def test_close_fails_queued_items_and_waits_for_the_running_batch(
    executor: ThreadPoolExecutor,
) -> None:
    fn = Recorder()
    fn.release.clear()
    batcher = MicroBatcher(fn, executor, max_items=8)
    running = asyncio.create_task(batcher.submit(1))
    await asyncio.to_thread(fn.started.wait, TIMEOUT)
    queued = asyncio.create_task(batcher.submit(2))
    await asyncio.sleep(0)
    closing = asyncio.create_task(batcher.aclose())
    await asyncio.sleep(0.01)
    assert not closing.done()  # waits for the running batch
    fn.release.set()
    await asyncio.wait_for(closing, TIMEOUT)
    assert await running == 2
    with pytest.raises(BatcherClosedError):
        await queued
    with pytest.raises(BatcherClosedError):
        await batcher.submit(3)


async def test_a_shut_down_executor_fails_the_waiters_instead_of_hanging() -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    pool.shutdown()
    batcher = MicroBatcher(Recorder(), pool)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(batcher.submit(1), TIMEOUT)


def test_invalid_limits_are_rejected(executor: ThreadPoolExecutor) -> None:
    with pytest.raises(ValueError):
        MicroBatcher(Recorder(), executor, max_items=0)
    with pytest.raises(ValueError):
        MicroBatcher(Recorder(), executor, max_wait=-1)
