"""A request's overall deadline (``request_timeout_seconds``), applied to the waits that could
outlast it. Deadlines are ``time.monotonic()`` values.

The read timeout already bounds each single wait on a replica (the first byte, the next chunk);
the deadline bounds their sum. An armed timer costs about 6 µs on these machines (measured:
``asyncio.timeout`` enter and exit), too much to pay per streamed chunk, so the stream reader
(``UpstreamStream.chunks``) reads with ``chunk_before`` only when less time is left than the
read timeout (otherwise the read timeout fires first anyway) and pays one clock read per chunk.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from types import TracebackType

from deja.errors import DeadlineExceededError


def deadline_error(deadline: float, doing: str) -> DeadlineExceededError:
    return DeadlineExceededError(
        f"the request's deadline passed while {doing} "
        f"({time.monotonic() - deadline:+.2f} s past it; DEJA_REQUEST_TIMEOUT_SECONDS)"
    )


def within(deadline: float, doing: str) -> DeadlineScope:
    """``async with within(deadline, doing)``: like ``asyncio.timeout_at``, but on monotonic
    time and ending in ``DeadlineExceededError``."""
    return DeadlineScope(deadline, doing)


class DeadlineScope:
    """The block is cancelled at ``deadline`` and raises ``DeadlineExceededError`` instead of
    ``TimeoutError``."""

    __slots__ = ("_deadline", "_doing", "_timeout")

    def __init__(self, deadline: float, doing: str) -> None:
        self._deadline = deadline
        self._doing = doing
        self._timeout = asyncio.timeout(deadline - time.monotonic())

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._timeout.__aexit__(exc_type, exc, tb)
        except TimeoutError as error:
            if self._timeout.expired():
                raise deadline_error(self._deadline, self._doing) from error
            raise


async def chunk_before(reader: AsyncIterator[bytes], deadline: float) -> bytes | None:
    """The next chunk of ``reader`` (None at its end), or ``DeadlineExceededError``."""
    try:
        async with within(deadline, "streaming the answer"):
            return await reader.__anext__()
    except StopAsyncIteration:
        return None
