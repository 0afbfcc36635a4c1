"""The body-read watch on the test's event loop, with receive functions standing in for the
server's (the 408 over real sockets is in tests/integration/test_admission.py)."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message

from deja.errors import BodyReadTimeoutError
from middleware.bodyread import BodyReadWatch

BODY: Message = {"type": "http.request", "body": b"{}", "more_body": False}


async def buffered() -> Message:
    return BODY


async def test_a_buffered_body_registers_nothing_and_later_reads_pass_through() -> None:
    watch = BodyReadWatch(timeout=0.2)
    receive = watch.watch(buffered)
    assert await receive() == BODY
    assert not watch._pending and not watch._sweep_armed
    gone = asyncio.Event()

    async def disconnect_later() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    after = watch.watch(buffered)
    await after()
    after._receive = disconnect_later  # type: ignore[attr-defined]
    waiting = asyncio.create_task(after())  # a disconnect watcher: no limit once the body is in
    await asyncio.sleep(0.5)
    assert not waiting.done()
    gone.set()
    assert (await waiting)["type"] == "http.disconnect"


async def test_a_body_that_never_comes_ends_in_408_and_the_task_lives_on() -> None:
    watch = BodyReadWatch(timeout=0.2)
    never = asyncio.Event()

    async def stalled() -> Message:
        await never.wait()
        return BODY

    receive = watch.watch(stalled)
    with pytest.raises(BodyReadTimeoutError):
        await receive()
    await asyncio.sleep(0.01)  # the cancellation was consumed: this task is not cancelled
    assert not watch._pending


async def test_a_trickle_is_bounded_as_a_whole_and_other_cancels_pass_through() -> None:
    watch = BodyReadWatch(timeout=0.3)

    async def piece() -> Message:
        await asyncio.sleep(0.1)
        return {"type": "http.request", "body": b"x", "more_body": True}

    receive = watch.watch(piece)
    with pytest.raises(BodyReadTimeoutError):
        for _ in range(10):  # 1 s of pieces 0.1 s apart: each in time, the whole not
            await receive()
    slow = watch.watch(piece)
    task = asyncio.create_task(slow())
    await asyncio.sleep(0.05)
    task.cancel()  # the client went away, say: a plain cancellation, not a 408
    with pytest.raises(asyncio.CancelledError):
        await task
