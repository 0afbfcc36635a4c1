"""The bounded queue in front of the semantic layer's CPU work (embedding, search, verifier).

Why a queue and not a timeout alone: on a 2-core machine one lookup costs about 12 ms of
embedder and, when its candidate is verified, 22 ms of verifier CPU (measured, MiniLM int8 on
one thread each; batching saves at most 8-9% there and changes the scores, since the work
grows with the tokens). Under load every lookup let in at once shares the same two threads,
so all of them slow down together and all of them run out of ``semantic_timeout_seconds``
together (issue 19: 112 of 113 lookups at 8 clients before the queue).
Here at most ``limit`` lookups hold a slot; the others wait their turn in
arrival order, for at most ``wait`` seconds, then are shed (a safe miss) without having
started any work. A slot's own work is then short enough to fit the budget, and the queue
absorbs the rest.

Background work (the embedding a shed lookup's answer still needs before it is stored) waits
behind every lookup: it never takes a lookup's place in line.

The number of slots follows the lookups' own latency, so that a slot's work fits the budget
on the machine as it is (e.g. shared): it halves on a lookup that still timed out, loses a
quarter on one that took more than half its budget, and grows back by 0.1 per lookup faster
than that; never below one or above ``limit``.
"""

from __future__ import annotations

import asyncio
import collections

Line = collections.deque[asyncio.Future[None]]


class LookupSlots:
    """At most ``cap`` holders at once; lookups served in order, background work after them."""

    def __init__(self, limit: int, wait: float) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.wait = wait
        #: Slots open now (:meth:`finished`).
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

    def finished(self, seconds: float, budget: float) -> None:
        """A lookup that held a slot took ``seconds`` of its ``budget`` (``>=``: it timed
        out): fewer slots when it was slow, one more every ten lookups when it was not."""
        if seconds >= budget:
            self.cap = max(1.0, self.cap / 2)
        elif seconds > budget / 2:
            self.cap = max(1.0, self.cap - 0.25)
        else:
            self.cap = min(float(self.limit), self.cap + 0.1)
            self._grant()

    def _grant(self) -> None:
        for line in self._lines:  # lookups first
            while line and self.running < int(self.cap):
                waiter = line.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    self.running += 1
