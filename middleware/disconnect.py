"""Cancel upstream work when the client goes away before an answer exists."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from deja.errors import ClientGoneError

T = TypeVar("T")

#: Completes when the client has disconnected.
Disconnected = Callable[[], Coroutine[Any, Any, None]]


async def until_disconnect(work: Coroutine[Any, Any, T], disconnected: Disconnected) -> T:
    """Run ``work`` but cancel it as soon as the client goes away."""
    loop = asyncio.get_running_loop()
    task = loop.create_task(work)
    watcher = loop.create_task(disconnected())
    try:
        done, _ = await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
    if task not in done:
        raise ClientGoneError("the client went away before the replica answered")
    return task.result()
