"""Work that runs after the response (storing answers, dropping stale points)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    """Keeps a reference to every task it starts until it finishes (asyncio holds only weak
    ones), so that shutdown and tests can wait for them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self) -> None:
        """Wait until every pending task has finished."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
