"""Server-sent-event plumbing of the simulated replica: disconnect racing and SSE output.

:class:`SSEResponse` runs a producer that writes events through an :class:`SSEWriter`;
:func:`race_disconnect` cancels work as soon as the client goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["SSEResponse", "SSEWriter", "race_disconnect"]


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(BaseException):
            await task


async def race_disconnect(receive: Receive, work: Awaitable[Any]) -> tuple[bool, Any]:
    """Run ``work`` until it ends or the client disconnects (then ``work`` is cancelled).

    Returns ``(True, result)`` when ``work`` finished, ``(False, None)`` on disconnect.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        await _cancel_and_wait(task, watcher)
        raise
    if task.done():
        await _cancel_and_wait(watcher)
        return True, task.result()
    await _cancel_and_wait(task)
    return False, None


class SSEResponse(Response):
    """A streaming response whose producer writes SSE bytes itself; the producer is
    cancelled (``CancelledError`` raised inside it) as soon as the client disconnects.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        producer: Callable[[SSEWriter], Awaitable[None]],
        headers: Mapping[str, str],
    ) -> None:
        self.status_code = 200
        self.background = None
        self._producer = producer
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        writer = SSEWriter(send)
        finished, _ = await race_disconnect(receive, self._producer(writer))
        if finished:
            await writer.flush()
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class SSEWriter:
    """Buffers SSE events; flushed before every sleep and at the end (few sends at speed 0)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._buffer: list[bytes] = []

    def event(self, payload: Mapping[str, Any]) -> None:
        self._buffer.append(b"data: " + orjson.dumps(payload) + b"\n\n")

    def done(self) -> None:
        self._buffer.append(b"data: [DONE]\n\n")

    async def flush(self) -> None:
        if self._buffer:
            body = b"".join(self._buffer)
            self._buffer.clear()
            await self._send({"type": "http.response.body", "body": body, "more_body": True})
