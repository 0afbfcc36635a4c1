"""The bounded queue in front of the semantic layer's CPU work (embedding, search, verifier).

Why a queue and not a timeout alone: on a 2-core machine one lookup costs about 12 ms of
embedder and, when its candidate is verified, 22 ms of verifier CPU (measured, MiniLM int8 on
one thread each; batching saves at most 8-9% there and changes the scores, since the work
grows with the tokens). Under load every lookup let in at once shares the same two threads,
so all of them slow down together and all of them run out of ``semantic_timeout_seconds``
together (issue 19). Here at most ``limit`` lookups hold a slot; the others wait their turn in
arrival order, for at most ``wait`` seconds, then are shed (a safe miss) without having
started any work. A slot's own work is then short enough to fit the budget, and the queue
absorbs the rest.

Background work (the embedding a shed lookup's answer still needs before it is stored) waits
behind every lookup: it never takes a lookup's place in line.

The number of slots halves on each lookup that still timed out (the machine is slower than
``limit`` assumes, e.g. shared), down to two (one embedding while another is verified), and
grows back by 0.1 per lookup that finished in time.
"""

from __future__ import annotations

import asyncio
import collections

Line = collections.deque[asyncio.Future[None]]

#: The fewest slots timeouts leave open: one lookup embedding while another is verified.
FLOOR = 2


class LookupSlots:
    """At most ``cap`` holders at once; lookups served in order, background work after them."""

    def __init__(self, limit: int, wait: float) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.wait = wait
        #: Slots open now: ``limit``, halved on each timeout (not below ``FLOOR``), +0.1 per
        #: lookup in time.
        self.cap = float(limit)
        self.running = 0
        self._lines: tuple[Line, Line] = (collections.deque(), collections.deque())

    @property
    def queued(self) -> int:
        """Lookups and background work waiting for a slot."""
        return sum(not waiter.done() for line in self._lines for waiter in line)

    async def acquire(self, wait: float | None = None, *, background: bool = False) -> bool:
        """Take a slot, waiting in line for up to ``wait`` seconds (default: the queue's):
        True once held (call :meth:`release`), False when none came in time (nothing held).
        ``background`` work waits until no lookup does."""
        for line in self._lines:
            while line and line[0].done():  # gave up waiting
                line.popleft()
        if self.running < int(self.cap) and not any(self._lines):
            self.running += 1
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lines[background].append(waiter)
        try:
            await asyncio.wait([waiter], timeout=self.wait if wait is None else wait)
        except BaseException:  # cancelled while waiting: a slot granted meanwhile goes back
            if waiter.done() and not waiter.cancelled():
                self.release()
            waiter.cancel()
            raise
        if waiter.done():
            return True
        waiter.cancel()  # left in its line; _grant skips it
        return False

    def release(self) -> None:
        self.running -= 1
        self._grant()

    def timed_out(self) -> None:
        """A lookup holding a slot ran out of its budget: fewer lookups at once."""
        self.cap = max(float(min(FLOOR, self.limit)), self.cap / 2)

    def in_time(self) -> None:
        """A lookup finished within its budget: one more slot every ten of them."""
        self.cap = min(float(self.limit), self.cap + 0.1)
        self._grant()

    def _grant(self) -> None:
        for line in self._lines:  # lookups first
            while line and self.running < int(self.cap):
                waiter = line.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    self.running += 1
