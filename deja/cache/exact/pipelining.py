"""Auto-pipelining of exact-store reads: the GETs that requests issue in the same event-loop turn
leave as one ``MGET``, one round trip and one pooled connection for all of them.

Under concurrency every request's lookup is its own command: a pool checkout, a write, a read
and the reply's parse each. Batched, the per-command work is paid once per turn. It matters
for reads that reach Redis (misses of the client-side tier, or every hit with the tier off);
``bench/exact_stores.py`` measures both ways.

On a Redis Cluster the batch cannot be one ``MGET`` (its keys are in many slots): the fetch
sends one pipeline per node instead (``deja.redisclient.read_many``), and a key whose node
failed gets that node's error while the keys of the other nodes get their values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

#: Most keys in one ``MGET``; a larger turn is split.
MAX_BATCH = 128

#: The values of the keys, in order; an exception in place of a value fails that key alone.
Fetch = Callable[[list[str]], Awaitable[list[bytes | BaseException | None]]]


class GetBatcher:
    """Collects ``get(key)`` calls made in one event-loop turn and fetches them together."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._pending: list[tuple[str, asyncio.Future[bytes | None]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self, key: str) -> bytes | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes | None] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((key, future))
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), MAX_BATCH):
            task = asyncio.get_running_loop().create_task(
                self._send(pending[start : start + MAX_BATCH])
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[str, asyncio.Future[bytes | None]]]) -> None:
        try:
            values = await self._fetch([key for key, _ in batch])
        except BaseException as exc:  # every waiter gets the batch's failure, never a hang
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, future), value in zip(batch, values, strict=True):
            if future.done():  # a caller that gave up (timeout, disconnect) is skipped
                continue
            if isinstance(value, BaseException):
                future.set_exception(value)
            else:
                future.set_result(value)
