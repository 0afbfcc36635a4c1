"""Micro-batching of blocking work submitted from the event loop.

:class:`MicroBatcher` gathers items submitted by many tasks and runs one synchronous batch
function for a group of them on an executor, so a burst of requests costs one hop to the worker
thread instead of one per item. At most one batch is in flight: items that arrive while a batch
runs wait for it and go together in the next one.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_Waiter = tuple[T, asyncio.Future[R]]


class BatcherClosedError(RuntimeError):
    """The batcher was closed before the item could run."""


class MicroBatcher(Generic[T, R]):
    """Runs ``fn`` over groups of submitted items on ``executor``, one group at a time.

    ``fn`` takes a list of items and returns one result per item, in order; it runs on the
    executor, never on the event loop. If it raises, every waiter of that batch gets the
    exception.

    When the batcher is idle, the first item waits up to ``max_wait`` seconds for company (0, the
    default, starts it at once) or until ``max_items`` are queued. Items that arrive while a
    batch is running are sent, up to ``max_items`` at a time, as soon as it ends: under load
    batches form by themselves, with no added wait. A waiter that is cancelled before its batch
    starts is left out of it; one cancelled later simply drops its result. Neither affects the
    other waiters.
    """

    def __init__(
        self,
        fn: Callable[[list[T]], Sequence[R]],
        executor: Executor,
        *,
        max_items: int = 16,
        max_wait: float = 0.0,
    ) -> None:
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        if max_wait < 0:
            raise ValueError("max_wait must not be negative")
        self._fn = fn
        self._executor = executor
        self.max_items = max_items
        self.max_wait = max_wait
        self._pending: collections.deque[_Waiter[T, R]] = collections.deque()
        self._running: asyncio.Future[Sequence[R]] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        #: How many batches of each size have run (size -> count).
        self.batch_sizes: collections.Counter[int] = collections.Counter()

    @property
    def pending(self) -> int:
        """Items queued and not yet sent to the executor."""
        return len(self._pending)

    async def submit(self, item: T) -> R:
        """Queue ``item`` and wait for its result (or its batch's exception)."""
        if self._closed:
            raise BatcherClosedError("the batcher is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        self._schedule(loop)
        return await future

    async def aclose(self) -> None:
        """Refuse new items, fail the queued ones with :class:`BatcherClosedError` and wait for
        the batch in flight, if any, to finish."""
        self._closed = True
        self._cancel_timer()
        while self._pending:
            _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(BatcherClosedError("the batcher was closed"))
        running = self._running
        if running is not None:
            # The batch's own waiters get its outcome; here only its end matters.
            await asyncio.wait([running])

    # --- internals ------------------------------------------------------------------------

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._running is not None:
            return  # the next batch starts when this one ends
        if self.max_wait <= 0 or len(self._pending) >= self.max_items:
            self._start(loop)
        elif self._timer is None:
            self._timer = loop.call_later(self.max_wait, self._on_timer, loop)

    def _on_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if self._running is None:
            self._start(loop)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._cancel_timer()
        batch: list[_Waiter[T, R]] = []
        while self._pending and len(batch) < self.max_items:
            waiter = self._pending.popleft()
            if not waiter[1].done():  # skip waiters cancelled while queued
                batch.append(waiter)
        if not batch:
            return
        items = [item for item, _ in batch]
        try:
            running = loop.run_in_executor(self._executor, self._fn, items)
        except Exception as exc:  # e.g. the executor was shut down
            _fail(batch, exc)
            if self._pending:
                loop.call_soon(self._schedule, loop)
            return
        self.batch_sizes[len(batch)] += 1
        self._running = running
        running.add_done_callback(lambda done: self._finish(loop, batch, done))

    def _finish(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[_Waiter[T, R]],
        done: asyncio.Future[Sequence[R]],
    ) -> None:
        self._running = None
        if done.cancelled():
            _fail(batch, BatcherClosedError("the batch was cancelled"))
        elif (exc := done.exception()) is not None:
            _fail(batch, exc)
        else:
            results = done.result()
            if len(results) != len(batch):
                _fail(batch, RuntimeError(f"{len(results)} results for {len(batch)} items"))
            else:
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        if self._pending and not self._closed:
            # These items already waited for the batch that just ended: no further wait.
            self._start(loop)


def _fail(batch: list[_Waiter[T, R]], exc: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
